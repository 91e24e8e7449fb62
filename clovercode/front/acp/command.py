"""``clovercode acp``: start the agent on stdio (docs/editors.md).

stdout carries the protocol and nothing else: a stray print, a library's progress bar or a child
process writing to fd 1 would corrupt it. So the protocol gets a private copy of fd 1, and fd 1
itself (with ``sys.stdout``) is pointed at stderr, which editors show as the agent's log.

The SDK takes about half a second to import; the editor's ``initialize`` is answered meanwhile by
the first-line reader (early.py, firstline.py), which starts only once the flags and the user's
config are known good, so a mistake in them is still reported before any byte of the protocol.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from typing import Any, Mapping

from clovercode.front.acp import early
from clovercode.ground.config import load_config
from clovercode.ground.errors import UsageError



def _no_sdk() -> UsageError:
    return UsageError("clovercode acp needs the Agent Client Protocol SDK",
                      hint="Install the acp extra: pip install 'clovercode[acp]'.")


def run_acp(flags: Mapping[str, Any], trust_project: bool) -> int:
    if importlib.util.find_spec("acp") is None:
        raise _no_sdk()
    load_config(None, os.environ, flags, trust_project)  # a bad flag or user config fails now, not per session
    problem = early.stdio_problem()
    if problem is not None:
        raise UsageError(f"clovercode acp talks to an editor over pipes, but {problem}",
                         hint="An editor starts it with pipes (docs/editors.md); to try it by hand, pipe "
                              "JSON-RPC lines in and read the answers from a pipe: ... | clovercode acp | cat")
    first = early.take()
    protocol_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        from clovercode.front.acp.server import CloverAgent, serve
    except ImportError as exc:
        if not (exc.name or "").startswith("acp"):
            raise
        raise _no_sdk() from None
    handoff = first.wait()
    agent = CloverAgent(flags, trust_project)
    asyncio.run(serve(agent, protocol_out, handoff))
    return 0
