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

test('merges over defaults', (t, done) => {
  loadConfig(tempConfig('{"port": 9000}'), (err, config) => {
    assert.equal(err, null);
    assert.equal(config.port, 9000);
    assert.equal(config.host, '127.0.0.1');
    done();
  });
});

test('describe', (t, done) => {
  describe(tempConfig('{"host": "0.0.0.0"}'), (err, text) => {
    assert.equal(text, 'listening on 0.0.0.0:8080');
    done();
  });
});
