'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { chunk } = require('../src/array');

test('even split', () => {
  assert.deepEqual(chunk([1, 2, 3, 4], 2), [[1, 2], [3, 4]]);
});

test('keeps the last partial chunk', () => {
  assert.deepEqual(chunk([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]]);
});
