// SPDX-License-Identifier: MIT
// Copyright (c) 2024 Lumen Labs
'use strict';
module.exports = { ...require('./color/mix'), ...require('./color/parse'), ...require('./util/clamp') };
