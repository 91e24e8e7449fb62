'use strict';

const NUMERALS = [
  [1000, 'M'],
  [900, 'CM'],
  [500, 'D'],
  [400, 'CD'],
  [100, 'C'],
  [90, 'XC'],
  [50, 'L'],
  [40, 'XL'],
  [10, 'X'],
  [9, 'IX'],
  [5, 'V'],
  [4, 'IV'],
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
