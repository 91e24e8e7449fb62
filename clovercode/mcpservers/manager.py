"""All configured MCP servers of one session: started together in the background (each one's tools
join the toolbox when it is ready), calls made with a timeout, stopped with the session. Nothing here raises into the agent loop: a
server that fails gives a start-up warning or an error observation."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from clovercode.actions.context import ApprovalRequest, Observation, ToolContext, ToolError
from clovercode.mcpservers.config import ServerConfig
from clovercode.mcpservers.connection import CLOSED, ServerConnection, describe_error
from clovercode.mcpservers.tools import qualified_name, result_text, tool_specs
from clovercode.ground.privatefiles import open_private, private_dir
from clovercode.toolcalls.schemas import ToolSpec

Handler = Callable[[ToolContext, dict[str, Any]], Observation]
CALL_GRACE = 5.0  # the loop thread's own timeout fires first; this one only guards against a stuck loop


def sdk_missing() -> str | None:
    """Whether the SDK is installed, found without importing it: the import (about a second) happens
    on the servers' own thread, not before the first prompt."""
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        return "MCP servers are configured but the `mcp` package is not installed: pip install 'clovercode[mcp]'"
    return None


@dataclass(frozen=True)
class McpTool:
    spec: ToolSpec
    server: str
    tool: str  # the name the server knows it by


class McpManager:
    def __init__(self, servers: Sequence[ServerConfig], root: Path, env: Mapping[str, str], log_dir: Path,
                 output_limit: int = 30000):
        self.configs = {s.name: s for s in servers}
        self.root, self.env, self.log_dir, self.output_limit = root, env, log_dir, output_limit
        self.connections: dict[str, ServerConnection] = {}
        self.revision = 0  # bumped whenever a server's tool list changes
        self._notes: list[tuple[str, str, bool]] = []
        self._pending: dict[str, "concurrent.futures.Future[None]"] = {}
        self._lock = threading.Lock()
        self._cache: tuple[int, list[McpTool], list[str]] | None = None
        self._runner: Any = None

    # --- life cycle ---

    def start(self) -> list[str]:
        """Start every enabled server and wait for all of them (`clovercode mcp list`, fix); returns
        the warnings (failed servers, left-out tools)."""
        self.start_background(announce=False)
        self.wait()
        return [text for _, text, _ in self.take_notes()]

    def start_background(self, *, announce: bool = True) -> None:
        """Start every enabled server without waiting: each server's tools join the toolset when it
        is ready (the next model turn's tools), and what happened becomes a note (take_notes):
        a failure, a tool left out, and with ``announce`` that it is ready."""
        enabled = [c for c in self.configs.values() if c.enabled]
        if not enabled or self._runner is not None:
            return
        missing = sdk_missing()
        if missing:
            self._note("mcp", missing)
            return
        from clovercode.mcpservers.runtime import LoopThread

        self._runner = LoopThread(log=self._client_log())
        for config in enabled:
            self.connections[config.name] = ServerConnection(config, self.root, self.env,
                                                             self.log_dir / f"{config.name}.log", self._changed)
        self._pending = {name: self._runner.submit(self._start_one(connection, announce))
                         for name, connection in self.connections.items()}

    async def _start_one(self, connection: ServerConnection, announce: bool) -> None:
        name = connection.config.name
        try:
            await connection.start()
        except Exception:  # noqa: BLE001 - the status and error say it; nothing raises into the session
            pass
        self._changed()  # its tools (or their absence) change the toolset
        if connection.status != "running":
            self._note("mcp", f"MCP server '{name}' is not available: {connection.error or connection.status}")
            return
        tools, left_out = self.tools_and_warnings()
        for text in left_out:
            if text.startswith(f"MCP server '{name}':"):
                self._note("mcp", text)
        if announce:
            count = len([t for t in tools if t.server == name])
            # said at the start of the first turn that offers them
            self._note("mcp", f"MCP server '{name}' is ready: its {count} tool{'' if count == 1 else 's'} "
                       "joined the model's tools", quiet=True)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every server has started or failed (at most ``timeout`` s); True when none is left starting."""
        pending = list(self._pending.values())
        if not pending:
            return True
        longest = max(c.config.startup_timeout for c in self.connections.values()) + 10.0
        done, _ = concurrent.futures.wait(pending, longest if timeout is None else timeout)
        return len(done) == len(pending)

    @property
    def starting(self) -> list[str]:
        """The servers still starting."""
        return [name for name, c in self.connections.items() if c.status in ("starting", "stopped")
                and name in self._pending and not self._pending[name].done()]

    def starting_prefixes(self) -> dict[str, str]:
        """Tool-name prefix → server, for the servers still starting (the validator's hint)."""
        return {qualified_name(name, ""): name for name in self.starting}

    def _note(self, category: str, text: str, *, quiet: bool = False) -> None:
        with self._lock:
            self._notes.append((category, text, quiet))

    def take_notes(self) -> list[tuple[str, str, bool]]:
        """What happened since the last call, said once: (category, text, quiet)."""
        with self._lock:
            notes, self._notes = self._notes, []
        return notes

    def _client_log(self) -> logging.Logger:
        """The SDK's and the event loop's messages go to mcp-logs/client.log: Python would print
        unhandled warnings on stderr, over the REPL."""
        loggers = [logging.getLogger(name) for name in ("mcp", "clovercode.mcp", "httpx2")]
        if any(getattr(h, "clovercode", False) for h in loggers[0].handlers):
            return loggers[1]  # an earlier session in this process set it up
        try:
            private_dir(self.log_dir)
            open_private(self.log_dir / "client.log").close()  # before logging creates it with the umask's mode
            handler: logging.Handler = logging.FileHandler(self.log_dir / "client.log", encoding="utf-8", delay=True)
        except OSError:
            handler = logging.NullHandler()
        handler.clovercode = True  # type: ignore[attr-defined]
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        for logger in loggers:
            logger.addHandler(handler)
            logger.propagate = False
        return loggers[1]

    def close(self) -> None:
        if self._runner is None:
            return
        runner, self._runner = self._runner, None

        async def stop_all() -> None:
            await asyncio.gather(*(c.stop() for c in self.connections.values()), return_exceptions=True)

        try:
            runner.run(stop_all(), 15.0)
        except (TimeoutError, Exception):  # noqa: BLE001 - closing must not fail the session's end
            pass
        runner.close()

    def _changed(self) -> None:
        with self._lock:
            self.revision += 1

    # --- the tool source seam ---

    def tools_and_warnings(self) -> tuple[list[McpTool], list[str]]:
        with self._lock:
            revision = self.revision
            if self._cache is not None and self._cache[0] == revision:
                return self._cache[1], self._cache[2]
        tools: list[McpTool] = []
        warnings: list[str] = []
        taken: set[str] = set()
        for name, connection in self.connections.items():
            if connection.status == "starting":  # its tools join once the handshake is done (_start_one)
                continue
            specs, left_out = tool_specs(name, list(connection.tools), taken)
            tools.extend(McpTool(spec, name, tool) for spec, tool in specs)
            warnings.extend(left_out)
        with self._lock:
            self._cache = (revision, tools, warnings)
        return tools, warnings

    def tools(self) -> list[tuple[ToolSpec, Handler]]:
        return [(t.spec, self._handler(t)) for t in self.tools_and_warnings()[0]]

    def _handler(self, tool: McpTool) -> Handler:
        def handle(ctx: ToolContext, arguments: dict[str, Any]) -> Observation:
            return self.call(ctx, tool, arguments)

        return handle

    def call(self, ctx: ToolContext, tool: McpTool, arguments: dict[str, Any]) -> Observation:
        config = self.configs[tool.server]
        if tool.tool not in config.auto_approve:
            shown = json_args(arguments)
            request = ApprovalRequest("mcp", f"{tool.server}: {tool.tool}", shown, rule=tool.spec.name)
            if not ctx.approve(request):
                raise ToolError(f"The user declined this call of `{tool.spec.name}`.")
        connection = self.connections.get(tool.server)
        if connection is None or self._runner is None:
            return Observation(False, f"Error: the MCP server '{tool.server}' is not running.")
        if connection.status != "running":
            return Observation(False, f"Error: the MCP server '{tool.server}' is not running, so its tools cannot be used "
                               f"in this session. Why: {connection.error or connection.status}")
        where = f"`{tool.tool}` on the MCP server '{tool.server}'"
        try:
            result = self._runner.run(connection.call(tool.tool, arguments), config.timeout + CALL_GRACE)
        except (TimeoutError, asyncio.TimeoutError):
            return Observation(False, f"Error: {where} did not answer within {config.timeout:g} s; the call was cancelled.",
                               {"server": tool.server, "timed_out": True})
        except Exception as exc:  # noqa: BLE001 - a server's failure is an observation, never a traceback
            text = describe_error(exc)
            if text == CLOSED:
                text += connection.stderr_tail()
                connection.mark_closed(text)
            return Observation(False, f"Error: {where} failed: {text}", {"server": tool.server})
        text = result_text(result, self.output_limit)
        if getattr(result, "is_error", False):
            return Observation(False, f"Error from {where}:\n{text}", {"server": tool.server})
        return Observation(True, text, {"server": tool.server})

    # --- for `clovercode mcp list` and `/tools` ---

    def status_rows(self) -> list[tuple[ServerConfig, str, str, list[McpTool]]]:
        tools = self.tools_and_warnings()[0]
        rows = []
        for name, config in self.configs.items():
            connection = self.connections.get(name)
            status = "disabled" if not config.enabled else (connection.status if connection else "not started")
            error = connection.error if connection else ""
            rows.append((config, status, error, [t for t in tools if t.server == name]))
        return rows


def json_args(arguments: dict[str, Any]) -> str:
    import json

    return json.dumps(arguments, ensure_ascii=False, indent=1)

