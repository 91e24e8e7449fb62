"""`clovercode respond`: act on a trusted mention with one follow-up commit on the pull request."""
