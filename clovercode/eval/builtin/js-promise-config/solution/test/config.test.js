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

test('merges over defaults', async () => {
  const config = await loadConfig(tempConfig('{"port": 9000}'));
  assert.equal(config.port, 9000);
  assert.equal(config.host, '127.0.0.1');
});

test('describe', async () => {
  assert.equal(await describe(tempConfig('{"host": "0.0.0.0"}')), 'listening on 0.0.0.0:8080');
});
