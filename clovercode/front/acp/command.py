"""``clovercode acp``: start the agent on stdio (docs/editors.md).

stdout carries the protocol and nothing else: a stray print, a library's progress bar or a child
process writing to fd 1 would corrupt it. So the protocol gets a private copy of fd 1, and fd 1
itself (with ``sys.stdout``) is pointed at stderr, which editors show as the agent's log.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, Mapping

from clovercode.ground.config import load_config
from clovercode.ground.errors import UsageError


def run_acp(flags: Mapping[str, Any], trust_project: bool) -> int:
    try:
        from clovercode.front.acp.server import CloverAgent, serve
    except ImportError as exc:
        if not (exc.name or "").startswith("acp"):
            raise
        raise UsageError("clovercode acp needs the Agent Client Protocol SDK",
                         hint="Install the acp extra: pip install 'clovercode[acp]'.") from None
    load_config(None, os.environ, flags, trust_project)  # a bad flag or user config fails now, not per session
    protocol_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    agent = CloverAgent(flags, trust_project)
    asyncio.run(serve(agent, protocol_out))
    return 0
