'use strict';

/** Parse "a=1&b=x%20y&a=2" into { a: ['1', '2'], b: 'x y' }: repeated keys become arrays. */
function parse(query) {
  const out = {};
  const text = query.startsWith('?') ? query.slice(1) : query;
  for (const part of text.split('&')) {
    if (!part) continue;
    const [rawKey, rawValue = ''] = part.split('=');
    const key = decodeURIComponent(rawKey.replace(/\+/g, ' '));
    const value = decodeURIComponent(rawValue.replace(/\+/g, ' '));
    if (key in out) {
      out[key] = [].concat(out[key], value);
    } else {
      out[key] = value;
    }
  }
  return out;
}

/** The inverse of parse(): see the README of this module in the issue tracker. */
function stringify(params) {
  const parts = [];
  for (const [key, value] of Object.entries(params)) {
    if (value === undefined || value === null) continue;
    for (const item of Array.isArray(value) ? value : [value]) {
      parts.push(`${encodeURIComponent(key)}=${encodeURIComponent(String(item))}`);
    }
  }
  return parts.join('&');
}

module.exports = { parse, stringify };
