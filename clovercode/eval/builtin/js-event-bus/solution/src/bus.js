'use strict';
const { Emitter } = require('./emitter');

/**
 * A message bus with named channels. `bus.channel('orders')` returns an object with
 * on(event, fn), once(event, fn) and emit(event, ...args) that work on events named
 * 'orders:<event>' of the shared emitter, so `bus.emitter.on('*', ...)` sees them all.
 * Asking twice for the same channel returns the same object.
 */
class Bus {
  constructor(emitter = new Emitter()) {
    this.emitter = emitter;
    this.channels = new Map();
  }

  channel(name) {
    if (!this.channels.has(name)) {
      const emitter = this.emitter;
      const full = (event) => `${name}:${event}`;
      this.channels.set(name, {
        on: (event, fn) => emitter.on(full(event), fn),
        once: (event, fn) => emitter.once(full(event), fn),
        emit: (event, ...args) => emitter.emit(full(event), ...args),
      });
    }
    return this.channels.get(name);
  }
}

module.exports = { Bus };
