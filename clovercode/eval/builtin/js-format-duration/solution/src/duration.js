'use strict';

/**
 * Human-readable duration for the build log: 3723000 ms -> "1h 2m 3s".
 * Units with a zero count are left out; under a second is "0s". Negative input is a RangeError.
 */
function formatDuration(ms) {
  if (ms < 0) throw new RangeError('negative duration');
  const total = Math.floor(ms / 1000);
  const hours = Math.floor(total / 3600);
  const minutes = Math.floor((total % 3600) / 60);
  const seconds = total % 60;
  const parts = [];
  if (hours) parts.push(`${hours}h`);
  if (minutes) parts.push(`${minutes}m`);
  if (seconds) parts.push(`${seconds}s`);
  return parts.length ? parts.join(' ') : '0s';
}

module.exports = { formatDuration };
