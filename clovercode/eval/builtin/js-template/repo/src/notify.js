'use strict';
const { escapeHtml } = require('./template');

const WELCOME = '<p>Welcome, {{ user.name }}! Your plan: {{ plan }}.</p>';

/** The welcome e-mail body for a new user. */
function welcome(user, plan) {
  return '<p>Welcome, ' + escapeHtml(user.name) + '! Your plan: ' + escapeHtml(plan) + '.</p>';
}

module.exports = { welcome, WELCOME };
