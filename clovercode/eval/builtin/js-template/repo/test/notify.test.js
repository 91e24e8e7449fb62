'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { welcome } = require('../src/notify');

test('welcome', () => {
  assert.equal(welcome({ name: 'Ada' }, 'pro'), '<p>Welcome, Ada! Your plan: pro.</p>');
});
