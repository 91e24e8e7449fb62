'use strict';

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
}

module.exports = { Cart };
