'use strict';
const fs = require('node:fs');

const DEFAULTS = { port: 8080, host: '127.0.0.1', verbose: false };

async function readConfig(path) {
  const text = await fs.promises.readFile(path, 'utf8');
  let data;
  try {
    data = JSON.parse(text);
  } catch (parseError) {
    throw new Error(`${path}: invalid JSON (${parseError.message})`);
  }
  return { ...DEFAULTS, ...data };
}

/**
 * Read a JSON config file and merge it over the defaults. Returns a Promise of the config,
 * rejected when the file cannot be read or is not valid JSON (the message then names the file).
 * The old callback(err, config) is still called when given.
 */
function loadConfig(path, callback) {
  const promise = readConfig(path);
  if (typeof callback === 'function') {
    promise.then((config) => callback(null, config), (err) => callback(err));
  }
  return promise;
}

module.exports = { loadConfig, DEFAULTS };
