'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { Emitter } = require('../src/emitter');
const { Bus } = require('../src/bus');
const { audit } = require('../src/audit');

test('unsubscribe function and off', () => {
  const e = new Emitter();
  const seen = [];
  const f = (v) => seen.push(`f${v}`);
  const stop = e.on('x', (v) => seen.push(`a${v}`));
  e.on('x', f);
  e.on('x', f);
  assert.equal(e.listenerCount('x'), 3);
  stop();
  e.off('x', f);
  e.off('x', () => {});
  e.off('nothing', f);
  e.emit('x', 1);
  assert.deepEqual(seen, ['f1']);
  assert.equal(e.listenerCount('x'), 1);
});

test('once', () => {
  const e = new Emitter();
  let calls = 0;
  e.once('x', () => calls++);
  e.emit('x');
  e.emit('x');
  assert.equal(calls, 1);
  assert.equal(e.listenerCount('x'), 0);
});

test('emit without listeners', () => {
  assert.equal(new Emitter().emit('nobody'), false);
});

test('wildcard gets the event name after direct listeners', () => {
  const e = new Emitter();
  const seen = [];
  e.on('*', (name, v) => seen.push(`*${name}${v}`));
  e.on('x', (v) => seen.push(`x${v}`));
  assert.equal(e.emit('x', 1), true);
  assert.deepEqual(seen, ['x1', '*x1']);
});

test('changes during emit apply from the next emit', () => {
  const e = new Emitter();
  const seen = [];
  e.on('x', () => {
    seen.push('first');
    e.on('x', () => seen.push('late'));
  });
  e.emit('x');
  assert.deepEqual(seen, ['first']);
});

test('channels are cached and namespaced', () => {
  const bus = new Bus();
  const orders = bus.channel('orders');
  assert.equal(bus.channel('orders'), orders);
  const seen = [];
  orders.on('paid', (v) => seen.push(v));
  bus.channel('users').emit('paid', 'wrong');
  orders.once('paid', (v) => seen.push(`once${v}`));
  orders.emit('paid', 1);
  orders.emit('paid', 2);
  assert.deepEqual(seen, [1, 'once1', 2]);
});

test('audit stop and copies', () => {
  const bus = new Bus();
  let t = 100;
  const log = audit(bus, () => t++);
  bus.channel('a').emit('e', 1, 2);
  const first = log.entries();
  first[0].args.push('mutated');
  log.stop();
  bus.channel('a').emit('e', 3);
  assert.deepEqual(log.entries(), [{ at: 100, event: 'a:e', args: [1, 2] }]);
});
