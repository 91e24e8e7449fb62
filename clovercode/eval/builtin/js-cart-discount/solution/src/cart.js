'use strict';
const { CODES } = require('./discounts');

/** A shopping cart: lines of { sku, price (in cents), quantity }. */
class Cart {
  constructor() {
    this.lines = [];
  }

  add(sku, price, quantity = 1) {
    const line = this.lines.find((l) => l.sku === sku);
    if (line) line.quantity += quantity;
    else this.lines.push({ sku, price, quantity });
    return this;
  }

  /** Use a discount code (case-insensitive); an unknown code throws and changes nothing. */
  applyCode(code) {
    const normalised = String(code).toUpperCase();
    if (!(normalised in CODES)) throw new Error(`unknown discount code: ${code}`);
    this.code = normalised;
    return this;
  }
}

module.exports = { Cart };
