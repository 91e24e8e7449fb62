'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { Cart } = require('../src/cart');
const { subtotal, total } = require('../src/pricing');

test('subtotal and total without a code', () => {
  const cart = new Cart().add('tea', 450, 2).add('mug', 1299);
  assert.equal(subtotal(cart), 2199);
  assert.equal(total(cart), 2199);
});
