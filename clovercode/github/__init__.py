"""GitHub REST API (stdlib HTTP): issues, pull requests, and the CI workflow `ci init` writes."""
