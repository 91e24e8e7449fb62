#!/usr/bin/env node
// SPDX-License-Identifier: MIT
// Copyright (c) 2024 Lumen Labs
'use strict';
// Prints the version being released.
console.log(require('../package.json').version);
