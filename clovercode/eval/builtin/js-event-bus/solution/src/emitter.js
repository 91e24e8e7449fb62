'use strict';

/** A minimal synchronous event emitter. */
class Emitter {
  constructor() {
    this.listeners = new Map(); // event name -> array of { fn, once }
  }

  /** Call `fn(...args)` on every `emit(event, ...args)`; returns a function that removes it. */
  on(event, fn) {
    return this.add(event, fn, false);
  }

  /** Like on(), but the listener is removed after its first call. */
  once(event, fn) {
    return this.add(event, fn, true);
  }

  add(event, fn, once) {
    if (typeof fn !== 'function') throw new TypeError('listener must be a function');
    const entry = { fn, once };
    this.listeners.set(event, [...(this.listeners.get(event) || []), entry]);
    return () => this.remove(event, entry);
  }

  remove(event, entry) {
    const list = (this.listeners.get(event) || []).filter((e) => e !== entry);
    if (list.length) this.listeners.set(event, list);
    else this.listeners.delete(event);
  }

  /** Remove one registration of `fn` for `event` (the earliest); no error if there is none. */
  off(event, fn) {
    const entry = (this.listeners.get(event) || []).find((e) => e.fn === fn);
    if (entry) this.remove(event, entry);
  }

  /**
   * Call the listeners of `event` in registration order with `args`, then the listeners of
   * '*' with (event, ...args). Listeners added or removed during an emit take effect from the
   * next emit. Returns true when at least one listener was called.
   */
  emit(event, ...args) {
    const direct = [...(this.listeners.get(event) || [])];
    const wildcard = event === '*' ? [] : [...(this.listeners.get('*') || [])];
    for (const entry of direct) {
      if (entry.once) this.remove(event, entry);
      entry.fn(...args);
    }
    for (const entry of wildcard) {
      if (entry.once) this.remove('*', entry);
      entry.fn(event, ...args);
    }
    return direct.length + wildcard.length > 0;
  }

  /** Number of listeners registered for `event`. */
  listenerCount(event) {
    return (this.listeners.get(event) || []).length;
  }
}

module.exports = { Emitter };
