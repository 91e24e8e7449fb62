"""`clovercode acp`: clovercode as an Agent Client Protocol agent on stdio, for editors (docs/editors.md).

One job a module: ``early`` and ``firstline`` read (and, when it is a plain ``initialize``, answer
with ``handshake``'s dict) the editor's first line while the SDK loads, ``stdio`` hands what they
read to the SDK's connection, ``transport`` checks every line before the SDK sees it, ``server`` answers the
protocol's requests, ``live`` is one open session, ``saved`` lists, finds and deletes saved sessions,
``modes`` the modes and config options, ``slash`` the slash commands, ``turns`` runs a prompt through
the agent loop on a worker thread, ``planflow`` a prompt in plan mode, ``outbox`` carries messages
from that thread to the client in order, ``updates`` turns loop events into ``session/update``
notifications, ``output`` streams a running command's output, ``markdown`` fences what is not
Markdown, ``history`` replays a saved conversation, ``permissions`` asks the client before acting,
``clientfs`` reads and writes the editor's buffers, ``mcp`` joins the client's MCP servers to the
user's, ``content`` turns prompt blocks into a task. The protocol itself is the official SDK's
(``agent-client-protocol``, the ``acp`` extra); ``server`` and ``transport`` import it at module
level, ``permissions`` and ``planflow`` only inside the calls that build its models.
"""
