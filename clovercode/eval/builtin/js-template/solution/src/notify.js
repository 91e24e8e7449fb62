'use strict';
const { render } = require('./template');

const WELCOME = '<p>Welcome, {{ user.name }}! Your plan: {{ plan }}.</p>';

/** The welcome e-mail body for a new user. */
function welcome(user, plan) {
  return render(WELCOME, { user, plan });
}

module.exports = { welcome, WELCOME };
