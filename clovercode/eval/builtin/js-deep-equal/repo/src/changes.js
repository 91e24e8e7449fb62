'use strict';
const { deepEqual } = require('./equal');

/** Keys whose values differ between two versions of a settings object. */
function changedKeys(before, after) {
  const keys = new Set([...Object.keys(before), ...Object.keys(after)]);
  return [...keys].filter((key) => !deepEqual(before[key], after[key])).sort();
}

module.exports = { changedKeys };
