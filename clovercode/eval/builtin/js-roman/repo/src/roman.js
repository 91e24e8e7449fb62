'use strict';

const NUMERALS = [
  [1000, 'M'],
  [500, 'D'],
  [100, 'C'],
  [50, 'L'],
  [10, 'X'],
  [5, 'V'],
  [1, 'I'],
];

/** Roman numeral for an integer from 1 to 3999 (RangeError otherwise), e.g. 1994 -> "MCMXCIV". */
function toRoman(value) {
  if (!Number.isInteger(value) || value < 1 || value > 3999) {
    throw new RangeError(`cannot write ${value} in Roman numerals`);
  }
  let out = '';
  for (const [amount, letters] of NUMERALS) {
    while (value >= amount) {
      out += letters;
      value -= amount;
    }
  }
  return out;
}

module.exports = { toRoman };
