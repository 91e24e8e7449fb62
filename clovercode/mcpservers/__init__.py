"""MCP servers as a tool source: configuration, the client manager, tools and results (docs/mcp-and-hooks.md)."""
