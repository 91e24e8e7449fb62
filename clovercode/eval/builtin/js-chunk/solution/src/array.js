'use strict';

/**
 * Split `items` into arrays of `size` elements; the last one may be shorter.
 * `size` must be a positive integer (RangeError otherwise).
 */
function chunk(items, size) {
  if (!Number.isInteger(size) || size < 1) {
    throw new RangeError(`size must be a positive integer, got ${size}`);
  }
  const out = [];
  for (let i = 0; i < items.length; i += size) {
    out.push(items.slice(i, i + size));
  }
  return out;
}

/** The first element of each chunk: used for pagination anchors. */
function anchors(items, size) {
  return chunk(items, size).map((page) => page[0]);
}

module.exports = { chunk, anchors };
