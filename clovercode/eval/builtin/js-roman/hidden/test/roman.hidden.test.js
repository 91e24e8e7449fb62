'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { toRoman } = require('../src/roman');

test('subtractive forms', () => {
  const cases = { 4: 'IV', 9: 'IX', 14: 'XIV', 40: 'XL', 90: 'XC', 400: 'CD', 900: 'CM', 1994: 'MCMXCIV', 3999: 'MMMCMXCIX', 49: 'XLIX' };
  for (const [value, expected] of Object.entries(cases)) {
    assert.equal(toRoman(Number(value)), expected);
  }
});

test('range', () => {
  assert.throws(() => toRoman(0), RangeError);
  assert.throws(() => toRoman(4000), RangeError);
  assert.throws(() => toRoman(2.5), RangeError);
});
