// SPDX-License-Identifier: MIT
// Copyright (c) 2024 Lumen Labs
'use strict';

function clamp(value, low, high) {
  return Math.min(high, Math.max(low, value));
}

module.exports = { clamp };
