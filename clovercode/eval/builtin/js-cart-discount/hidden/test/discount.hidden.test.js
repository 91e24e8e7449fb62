'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { Cart } = require('../src/cart');
const { discount, subtotal, total } = require('../src/pricing');

test('percentage off, rounded half up', () => {
  const cart = new Cart().add('tea', 450, 2).add('mug', 1299);
  cart.applyCode('SPRING10');
  assert.equal(discount(cart), 220);
  assert.equal(total(cart), 1979);
  assert.equal(subtotal(cart), 2199);
});

test('codes are case-insensitive and the last one wins', () => {
  const cart = new Cart().add('book', 2000);
  cart.applyCode('spring10');
  cart.applyCode('Welcome15');
  assert.equal(total(cart), 1700);
});

test('unknown code', () => {
  const cart = new Cart().add('book', 2000);
  cart.applyCode('SPRING10');
  assert.throws(() => cart.applyCode('FREESTUFF'), /FREESTUFF/);
  assert.equal(total(cart), 1800);
});

test('no code means no discount', () => {
  const cart = new Cart().add('pen', 99);
  assert.equal(discount(cart), 0);
  assert.equal(total(cart), 99);
});

test('half a cent rounds up', () => {
  const cart = new Cart().add('x', 5);
  cart.applyCode('SPRING10');
  assert.equal(discount(cart), 1);
  assert.equal(total(cart), 4);
});
