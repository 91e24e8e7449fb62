'use strict';
const fs = require('node:fs');

/**
 * Read a JSON config file and merge it over the defaults.
 * callback(err, config): err when the file cannot be read or is not valid JSON
 * (its message then names the file).
 */
function loadConfig(path, callback) {
  fs.readFile(path, 'utf8', (err, text) => {
    if (err) return callback(err);
    let data;
    try {
      data = JSON.parse(text);
    } catch (parseError) {
      return callback(new Error(`${path}: invalid JSON (${parseError.message})`));
    }
    callback(null, { ...DEFAULTS, ...data });
  });
}

const DEFAULTS = { port: 8080, host: '127.0.0.1', verbose: false };

module.exports = { loadConfig, DEFAULTS };
