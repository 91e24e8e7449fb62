'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { parse, stringify } = require('../src/qs');

test('basic', () => {
  assert.equal(stringify({ q: 'hello world', page: 2, exact: true }), 'q=hello%20world&page=2&exact=true');
});

test('arrays and skipped values', () => {
  assert.equal(stringify({ tag: ['a', 'b&c'], none: null, missing: undefined, z: '' }), 'tag=a&tag=b%26c&z=');
});

test('keys are encoded', () => {
  assert.equal(stringify({ 'a b': 'c=d' }), 'a%20b=c%3Dd');
});

test('empty', () => {
  assert.equal(stringify({}), '');
});

test('round trip', () => {
  const params = { a: ['1', '2'], b: 'x y', 'ü': 'ß' };
  assert.deepEqual(parse(stringify(params)), params);
});
