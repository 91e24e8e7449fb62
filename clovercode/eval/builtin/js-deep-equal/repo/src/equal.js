'use strict';

/**
 * Structural equality for JSON-like values: primitives (NaN equals NaN), arrays (same length,
 * equal elements in order) and plain objects (same set of keys, equal values). An array never
 * equals an object.
 */
function deepEqual(a, b) {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) {
    return false;
  }
  for (const key of Object.keys(a)) {
    if (!deepEqual(a[key], b[key])) return false;
  }
  return true;
}

module.exports = { deepEqual };
