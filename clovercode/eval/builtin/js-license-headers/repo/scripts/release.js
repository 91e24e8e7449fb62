#!/usr/bin/env node
'use strict';
// Prints the version being released.
console.log(require('../package.json').version);
