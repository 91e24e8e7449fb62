'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { formatDuration } = require('../src/duration');

test('minutes wrap at an hour', () => {
  assert.equal(formatDuration(3723000), '1h 2m 3s');
  assert.equal(formatDuration(7200000), '2h');
  assert.equal(formatDuration(3660000), '1h 1m');
  assert.equal(formatDuration(90000), '1m 30s');
});

test('under a second', () => {
  assert.equal(formatDuration(0), '0s');
  assert.equal(formatDuration(400), '0s');
});

test('negative', () => {
  assert.throws(() => formatDuration(-1), RangeError);
});
