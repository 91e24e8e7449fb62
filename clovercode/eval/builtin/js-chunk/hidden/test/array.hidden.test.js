'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { chunk, anchors } = require('../src/array');

test('partial last chunk', () => {
  assert.deepEqual(chunk(['a', 'b', 'c'], 2), [['a', 'b'], ['c']]);
  assert.deepEqual(chunk([1, 2], 5), [[1, 2]]);
});

test('empty input', () => {
  assert.deepEqual(chunk([], 3), []);
});

test('bad sizes throw RangeError', () => {
  for (const bad of [0, -1, 1.5, NaN]) {
    assert.throws(() => chunk([1, 2, 3], bad), RangeError, String(bad));
  }
});

test('anchors include the last page', () => {
  assert.deepEqual(anchors([1, 2, 3, 4, 5], 2), [1, 3, 5]);
});
