'use strict';
const { loadConfig } = require('./config');

/** Start-up: load the config and describe where the server will listen. */
async function describe(path) {
  const config = await loadConfig(path);
  return `listening on ${config.host}:${config.port}`;
}

module.exports = { describe };
