'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { render } = require('../src/template');
const { welcome } = require('../src/notify');

test('values and paths', () => {
  assert.equal(render('Hi {{name}} from {{ team.city }}', { name: 'Ada', team: { city: 'London' } }), 'Hi Ada from London');
});

test('escaping', () => {
  assert.equal(render('{{ x }}|{{{ x }}}', { x: '<b>&"' }), '&lt;b&gt;&amp;&quot;|<b>&"');
});

test('missing values', () => {
  assert.equal(render('[{{ a.b.c }}][{{ n }}]', { a: null, n: undefined }), '[][]');
});

test('numbers and text kept', () => {
  assert.equal(render('{{n}} items, { not a tag }', { n: 0 }), '0 items, { not a tag }');
});

test('welcome uses the template', () => {
  assert.equal(welcome({ name: '<Ada>' }, 'pro'), '<p>Welcome, &lt;Ada&gt;! Your plan: pro.</p>');
  const source = fs.readFileSync(path.join(__dirname, '..', 'src', 'notify.js'), 'utf8');
  assert.match(source, /render\(/);
});
