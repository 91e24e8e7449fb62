'use strict';

const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** HTML-escape a value for text and attribute positions. */
function escapeHtml(value) {
  return String(value).replace(/[&<>"']/g, (ch) => ESCAPES[ch]);
}

/**
 * Render `template` with values from `context`.
 *
 *   {{ name }}       the value, HTML-escaped
 *   {{{ name }}}     the value, not escaped
 *   {{ user.name }}  dotted paths walk into nested objects
 *
 * Spaces inside the braces are optional. A missing value (undefined or null anywhere along the
 * path) renders as the empty string. Everything else in the template is copied as is.
 */
function render(template, context) {
  throw new Error('render() is not implemented yet');
}

module.exports = { render, escapeHtml };
