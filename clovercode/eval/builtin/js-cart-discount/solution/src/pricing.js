'use strict';
const { CODES } = require('./discounts');

/** Sum of price * quantity, in cents. */
function subtotal(cart) {
  return cart.lines.reduce((sum, line) => sum + line.price * line.quantity, 0);
}

/** The amount taken off by the cart's discount code, in cents (rounded half up). */
function discount(cart) {
  if (!cart.code) return 0;
  return Math.round((subtotal(cart) * CODES[cart.code]) / 100);
}

/** What the customer pays, in cents. */
function total(cart) {
  return subtotal(cart) - discount(cart);
}

module.exports = { subtotal, discount, total };
