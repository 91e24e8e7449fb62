'use strict';

/** Sum of price * quantity, in cents. */
function subtotal(cart) {
  return cart.lines.reduce((sum, line) => sum + line.price * line.quantity, 0);
}

/** What the customer pays, in cents. */
function total(cart) {
  return subtotal(cart);
}

module.exports = { subtotal, total };
