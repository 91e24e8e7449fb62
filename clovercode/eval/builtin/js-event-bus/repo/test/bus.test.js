'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { Emitter } = require('../src/emitter');
const { Bus } = require('../src/bus');
const { audit } = require('../src/audit');

test('on and emit', () => {
  const e = new Emitter();
  const seen = [];
  e.on('x', (v) => seen.push(v));
  assert.equal(e.emit('x', 1), true);
  assert.deepEqual(seen, [1]);
});

test('channels and audit', () => {
  const bus = new Bus();
  let t = 0;
  const log = audit(bus, () => ++t);
  bus.channel('orders').emit('created', { id: 7 });
  assert.deepEqual(log.entries(), [{ at: 1, event: 'orders:created', args: [{ id: 7 }] }]);
});
