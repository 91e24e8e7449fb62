'use strict';

/** A minimal synchronous event emitter. */
class Emitter {
  constructor() {
    this.listeners = new Map(); // event name -> array of { fn, once }
  }

  /** Call `fn(...args)` on every `emit(event, ...args)`; returns a function that removes it. */
  on(event, fn) {
    throw new Error('not implemented');
  }

  /** Like on(), but the listener is removed after its first call. */
  once(event, fn) {
    throw new Error('not implemented');
  }

  /** Remove one registration of `fn` for `event` (the earliest); no error if there is none. */
  off(event, fn) {
    throw new Error('not implemented');
  }

  /**
   * Call the listeners of `event` in registration order with `args`, then the listeners of
   * '*' with (event, ...args). Listeners added or removed during an emit take effect from the
   * next emit. Returns true when at least one listener was called.
   */
  emit(event, ...args) {
    throw new Error('not implemented');
  }

  /** Number of listeners registered for `event`. */
  listenerCount(event) {
    throw new Error('not implemented');
  }
}

module.exports = { Emitter };
