'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { mix, parseHex } = require('../src/index');

test('mix', () => {
  assert.deepEqual(mix(parseHex('#000000'), parseHex('#ffffff'), 0.5), [128, 128, 128]);
});
