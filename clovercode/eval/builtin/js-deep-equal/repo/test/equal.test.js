'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { deepEqual } = require('../src/equal');

test('equal structures', () => {
  assert.equal(deepEqual({ a: [1, { b: 2 }] }, { a: [1, { b: 2 }] }), true);
});

test('extra keys matter', () => {
  assert.equal(deepEqual({ a: 1 }, { a: 1, b: 2 }), false);
});
