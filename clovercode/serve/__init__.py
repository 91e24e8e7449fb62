"""``clovercode serve``: any model backend behind an OpenAI-compatible HTTP API (docs/endpoint.md)."""
