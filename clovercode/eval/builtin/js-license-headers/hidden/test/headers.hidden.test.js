'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { mix, clamp } = require('../src/index');

const ROOT = path.resolve(__dirname, '..');
const HEADER = '// SPDX-License-Identifier: MIT\n// Copyright (c) 2024 Lumen Labs\n';

test('the header check passes', () => {
  const out = execFileSync(process.execPath, [path.join(ROOT, 'scripts', 'check-headers.js')], { encoding: 'utf8' });
  assert.match(out, /license headers: ok/);
});

test('headers are exact and nothing else changed', () => {
  const mixSource = fs.readFileSync(path.join(ROOT, 'src', 'color', 'mix.js'), 'utf8');
  assert.ok(mixSource.startsWith(HEADER + "'use strict';\n"));
  const release = fs.readFileSync(path.join(ROOT, 'scripts', 'release.js'), 'utf8');
  assert.ok(release.startsWith('#!/usr/bin/env node\n' + HEADER));
  assert.equal(clamp(5, 0, 3), 3);
  assert.deepEqual(mix([0, 0, 0], [10, 10, 10], 2), [10, 10, 10]);
});
