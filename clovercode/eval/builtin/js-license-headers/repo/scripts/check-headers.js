#!/usr/bin/env node
// SPDX-License-Identifier: MIT
// Copyright (c) 2024 Lumen Labs
'use strict';
// CI step: every .js file under src/ and scripts/ must start with the license header.
const fs = require('node:fs');
const path = require('node:path');

const HEADER = '// SPDX-License-Identifier: MIT\n// Copyright (c) 2024 Lumen Labs\n';
const ROOT = path.resolve(__dirname, '..');

function* jsFiles(dir) {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) yield* jsFiles(full);
    else if (entry.name.endsWith('.js')) yield full;
  }
}

function hasHeader(text) {
  const body = text.startsWith('#!') ? text.slice(text.indexOf('\n') + 1) : text;
  return body.startsWith(HEADER);
}

const missing = [];
for (const dir of ['src', 'scripts']) {
  for (const file of jsFiles(path.join(ROOT, dir))) {
    if (!hasHeader(fs.readFileSync(file, 'utf8'))) missing.push(path.relative(ROOT, file));
  }
}
if (missing.length) {
  console.error(`missing license header in ${missing.length} file(s):`);
  for (const file of missing) console.error(`  ${file}`);
  process.exit(1);
}
console.log('license headers: ok');
