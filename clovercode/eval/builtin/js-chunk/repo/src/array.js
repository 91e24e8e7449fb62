'use strict';

/**
 * Split `items` into arrays of `size` elements; the last one may be shorter.
 * `size` must be a positive integer (RangeError otherwise).
 */
function chunk(items, size) {
  const out = [];
  if (!(size > 0)) return out;
  for (let i = 0; i + size <= items.length; i += size) {
    out.push(items.slice(i, i + size));
  }
  return out;
}

/** The first element of each chunk: used for pagination anchors. */
function anchors(items, size) {
  return chunk(items, size).map((page) => page[0]);
}

module.exports = { chunk, anchors };
