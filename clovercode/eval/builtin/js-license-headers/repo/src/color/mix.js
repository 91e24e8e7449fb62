'use strict';
const { clamp } = require('../util/clamp');

/** Mix two RGB colours; t = 0 gives a, t = 1 gives b. */
function mix(a, b, t) {
  const k = clamp(t, 0, 1);
  return a.map((channel, i) => Math.round(channel + (b[i] - channel) * k));
}

module.exports = { mix };
