"""The ground floor: errors, messages, events, settings and config, files and signals; every layer
imports these and they import no layer above (docs/architecture.md)."""
