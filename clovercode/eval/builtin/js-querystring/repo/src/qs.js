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

module.exports = { parse };
