'use strict';

/** Discount codes from the marketing team: code -> percentage off the subtotal. */
const CODES = {
  SPRING10: 10,
  WELCOME15: 15,
};

module.exports = { CODES };
