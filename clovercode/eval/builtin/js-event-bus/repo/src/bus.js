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
  }

  channel(name) {
    throw new Error('not implemented');
  }
}

module.exports = { Bus };
