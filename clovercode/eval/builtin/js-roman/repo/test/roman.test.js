'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { toRoman } = require('../src/roman');

test('simple numbers', () => {
  assert.equal(toRoman(3), 'III');
  assert.equal(toRoman(2024), 'MMXXIV');
});
