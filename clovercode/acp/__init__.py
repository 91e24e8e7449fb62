"""`clovercode acp`: clovercode as an Agent Client Protocol agent on stdio, for editors (docs/editors.md).

One job a module: ``server`` answers the protocol's requests, ``turns`` runs a prompt through the
agent loop on a worker thread, ``outbox`` carries messages from that thread to the client in order,
``updates`` turns loop events into ``session/update`` notifications, ``history`` replays a saved
conversation, ``permissions`` asks the client before acting, ``clientfs`` reads and writes the
editor's buffers, ``mcp`` joins the client's MCP servers to the user's, ``content`` turns prompt
blocks into a task. The protocol itself is the official SDK's (``agent-client-protocol``, the
``acp`` extra); nothing here imports it at module level but ``server``.
"""
