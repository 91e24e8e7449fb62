'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { deepEqual } = require('../src/equal');
const { changedKeys } = require('../src/changes');

test('keys both ways', () => {
  assert.equal(deepEqual({ a: 1, b: 2 }, { a: 1 }), false);
  assert.equal(deepEqual({ a: 1 }, { a: 1, b: 2 }), false);
  assert.equal(deepEqual({ a: undefined }, { b: undefined }), false);
});

test('arrays', () => {
  assert.equal(deepEqual([1, 2], [1, 2, 3]), false);
  assert.equal(deepEqual([1, 2], { 0: 1, 1: 2 }), false);
  assert.equal(deepEqual({ 0: 1 }, [1]), false);
  assert.equal(deepEqual([[1], [2]], [[1], [2]]), true);
});

test('NaN and primitives', () => {
  assert.equal(deepEqual(NaN, NaN), true);
  assert.equal(deepEqual(1, '1'), false);
  assert.equal(deepEqual(null, {}), false);
  assert.equal(deepEqual(null, null), true);
});

test('changed keys', () => {
  assert.deepEqual(changedKeys({ a: [1], b: 1 }, { a: [1, 2], b: 1, c: 0 }), ['a', 'c']);
});
