'use strict';
const { loadConfig } = require('./config');

/** Start-up: load the config and describe where the server will listen. */
function describe(path, callback) {
  loadConfig(path, (err, config) => {
    if (err) return callback(err);
    callback(null, `listening on ${config.host}:${config.port}`);
  });
}

module.exports = { describe };
