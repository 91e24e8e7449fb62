// SPDX-License-Identifier: MIT
// Copyright (c) 2024 Lumen Labs
'use strict';

/** [255, 136, 0] -> '#ff8800' */
function toHex(rgb) {
  return '#' + rgb.map((c) => c.toString(16).padStart(2, '0')).join('');
}

module.exports = { toHex };
