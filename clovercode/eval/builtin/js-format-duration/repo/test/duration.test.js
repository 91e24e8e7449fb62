'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { formatDuration } = require('../src/duration');

test('seconds', () => {
  assert.equal(formatDuration(42000), '42s');
});

test('hours, minutes and seconds', () => {
  assert.equal(formatDuration(3723000), '1h 2m 3s');
});
