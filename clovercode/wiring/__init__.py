"""The wiring: a session built from the config (model, tools, context, hooks, MCP) and the saved
sessions; the one place the layers below are put together for the front ends."""
