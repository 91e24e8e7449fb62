'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { parse } = require('../src/qs');

test('parse', () => {
  assert.deepEqual(parse('?a=1&b=x%20y&a=2'), { a: ['1', '2'], b: 'x y' });
});
