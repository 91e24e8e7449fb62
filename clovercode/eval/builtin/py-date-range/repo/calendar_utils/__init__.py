"""Date helpers for the booking service."""
