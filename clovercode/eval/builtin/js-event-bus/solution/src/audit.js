'use strict';

/**
 * Records every event on a bus as { at, event, args } using `clock()` for the time.
 * stop() ends the recording. entries() returns a copy of what was recorded.
 */
function audit(bus, clock = Date.now) {
  const recorded = [];
  const stop = bus.emitter.on('*', (event, ...args) => recorded.push({ at: clock(), event, args }));
  return { stop, entries: () => recorded.map((entry) => ({ ...entry, args: [...entry.args] })) };
}

module.exports = { audit };
