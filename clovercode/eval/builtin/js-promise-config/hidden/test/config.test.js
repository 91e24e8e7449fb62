'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { loadConfig } = require('../src/config');
const { describe } = require('../src/app');

function tempConfig(text) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cfg-'));
  const file = path.join(dir, 'config.json');
  fs.writeFileSync(file, text);
  return file;
}

test('returns a promise', async () => {
  const result = loadConfig(tempConfig('{"port": 9000}'));
  assert.ok(result instanceof Promise);
  assert.deepEqual(await result, { port: 9000, host: '127.0.0.1', verbose: false });
});

test('rejects invalid JSON naming the file', async () => {
  const file = tempConfig('{port: }');
  await assert.rejects(loadConfig(file), (err) => err.message.startsWith(`${file}: invalid JSON`));
});

test('rejects a missing file', async () => {
  await assert.rejects(loadConfig('/nonexistent/config.json'), { code: 'ENOENT' });
});

test('callback still works', (t, done) => {
  loadConfig(tempConfig('{"verbose": true}'), (err, config) => {
    assert.equal(err, null);
    assert.equal(config.verbose, true);
    done();
  });
});

test('callback gets errors', (t, done) => {
  loadConfig('/nonexistent/config.json', (err, config) => {
    assert.equal(err.code, 'ENOENT');
    assert.equal(config, undefined);
    done();
  });
});

test('describe is async', async () => {
  assert.equal(await describe(tempConfig('{"host": "0.0.0.0"}')), 'listening on 0.0.0.0:8080');
});
