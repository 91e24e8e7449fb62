// SPDX-License-Identifier: MIT
// Copyright (c) 2024 Lumen Labs
'use strict';

/** '#ff8800' -> [255, 136, 0] */
function parseHex(text) {
  const m = /^#?([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(text);
  if (!m) throw new Error(`not a colour: ${text}`);
  return m.slice(1).map((h) => parseInt(h, 16));
}

module.exports = { parseHex };
