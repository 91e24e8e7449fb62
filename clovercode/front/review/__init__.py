"""`clovercode review`: a read-only review of a change, optionally posted on its pull request."""
