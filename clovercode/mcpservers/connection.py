"""One MCP server, held open by a task on the loop thread through the official ``mcp`` SDK.

The SDK's ``Client`` is an async context manager whose task groups must be entered and left by the
same task, so ``_hold`` keeps it open for the whole session; calls come from other tasks.
Tool-list changes arrive as ``notifications/tools/list_changed`` (handshake-era servers) or through
``subscriptions/listen`` (2026-era servers); both refetch the list.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import IO, Any, Callable, Mapping

from clovercode.mcpservers.config import ServerConfig
from clovercode.ground.privatefiles import open_private, private_dir

MAX_PAGES = 50  # a paginating server that never ends cannot hang start-up
STDERR_TAIL = 600  # characters of a server's stderr quoted when it fails
STDERR_LINES = 6
CLOSED = "the server closed the connection (it exited or crashed)"


class ServerConnection:
    def __init__(self, config: ServerConfig, root: Path, env: Mapping[str, str], log_path: Path,
                 on_change: Callable[[], None]):
        self.config, self.root, self.env, self.log_path, self.on_change = config, root, env, log_path, on_change
        self.status = "stopped"  # starting, running, failed, crashed, stopped
        self.error = ""
        self.tools: list[Any] = []  # mcp Tool objects, as the server listed them
        self.server_name = ""
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._log: IO[str] | None = None
        self._background: set[asyncio.Task] = set()

    # --- life cycle (coroutines run on the loop thread) ---

    async def start(self) -> None:
        """Connect and list the tools; raises (after cleaning up) when that fails or takes too long."""
        self.status, self.error = "starting", ""
        self._stop = asyncio.Event()
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(ready))
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.config.startup_timeout)
        except BaseException as exc:
            self.status = "failed"
            self.error = self._describe_start_failure(exc)
            await self.stop()
            self.status = "failed"
            raise
        self.status = "running"

    async def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            if self.status != "running":  # still in the handshake: nothing to say goodbye to
                task.cancel()
            # The SDK's own shutdown (close stdin, then TERM, then KILL) is bounded; this bounds it again.
            done, _ = await asyncio.wait({task}, timeout=8.0)
            if not done:
                task.cancel()
                await asyncio.wait({task}, timeout=2.0)
        for background in list(self._background):
            background.cancel()
        if self.status in ("running", "starting"):
            self.status = "stopped"
        if self._log is not None:
            self._log.close()
            self._log = None

    async def _hold(self, ready: asyncio.Future) -> None:
        import anyio
        from mcp import Client, Implementation

        from clovercode import __version__

        try:
            async with Client(self._target(), mode="auto", read_timeout_seconds=self.config.timeout, cache=None,
                              message_handler=self._on_message,
                              client_info=Implementation(name="clovercode", version=__version__)) as client:
                self._client = client
                info = client.server_info
                self.server_name = f"{info.name} {info.version}".strip() if info else ""
                await self.refresh()
                if not ready.done():
                    ready.set_result(None)
                async with anyio.create_task_group() as group:
                    if self._can_listen(client):
                        group.start_soon(self._listen, client)
                    assert self._stop is not None
                    await self._stop.wait()
                    group.cancel_scope.cancel()
        except BaseException as exc:  # noqa: BLE001 - any failure becomes a status, never a traceback
            if not ready.done():
                if isinstance(exc, Exception):
                    ready.set_exception(exc)
                else:
                    ready.cancel()
            elif self.status == "running" and not (self._stop and self._stop.is_set()):
                self.status, self.error = "crashed", describe_error(exc) + self.stderr_tail()
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._client = None
            if self.status == "running" and not (self._stop and self._stop.is_set()):
                self.status, self.error = "crashed", "the connection closed" + self.stderr_tail()

    def _target(self) -> Any:
        from mcp import StdioServerParameters

        if self.config.url:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = create_mcp_http_client(headers=dict(self.config.headers) or None)
            return _HttpTransport(streamable_http_client(self.config.url, http_client=http), http)
        env = {name: self.env[name] for name in self.config.env_vars if name in self.env}
        env.update(self.config.env)
        private_dir(self.log_path.parent)
        self._log = open_private(self.log_path, "w")  # the server's stderr: quoted when it fails
        cwd = Path(self.config.cwd).expanduser() if self.config.cwd else self.root
        params = StdioServerParameters(command=self.config.command, args=list(self.config.args), env=env,
                                       cwd=str(cwd if cwd.is_absolute() else self.root / cwd))
        from mcp.client.stdio import stdio_client

        return _StdioTransport(stdio_client(params, errlog=self._log))

    # --- tools ---

    async def refresh(self) -> None:
        client = self._client
        if client is None:
            return
        tools, cursor = [], None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = tools
        self.on_change()

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        import anyio

        client = self._client
        if client is None:
            raise ConnectionError(self.error or "the server is not running")
        with anyio.fail_after(self.config.timeout):
            result = await client.call_tool(tool, arguments)
            # A tool that changes the list says so next to its result: let that refresh land before the
            # model's next turn is validated against the list.
            await asyncio.sleep(0.02)
            if self._background:
                await asyncio.wait(set(self._background))
        return result

    async def _on_message(self, message: Any) -> None:
        if type(message).__name__ == "ToolListChangedNotification":
            self._spawn(self._refresh_quietly())

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh()
        except Exception:  # noqa: BLE001 - the old list stays; a dead server shows at its next call
            pass

    def _can_listen(self, client: Any) -> bool:
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        tools = getattr(client.server_capabilities, "tools", None)
        return client.protocol_version in MODERN_PROTOCOL_VERSIONS and bool(getattr(tools, "list_changed", False))

    async def _listen(self, client: Any) -> None:
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    pass  # the SDK also hands each event to _on_message as a list_changed notification
        except Exception:  # noqa: BLE001 - no live updates from this server; its tools stay as listed
            return

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- text for people and the model ---

    def stderr_tail(self) -> str:
        if self.config.url:
            return ""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace").strip() if self.log_path.is_file() else ""
        except OSError:
            return ""
        lines = [line.rstrip() for line in text.splitlines() if line.strip()][-STDERR_LINES:]
        tail = "\n".join(lines)[-STDERR_TAIL:]
        return f"; its stderr ends with:\n{tail}" if tail else ""

    def mark_closed(self, why: str) -> None:
        """A call found the connection gone: the server's other tools are unavailable from now on."""
        if self.status == "running":
            self.status, self.error = "crashed", why

    def _describe_start_failure(self, exc: BaseException) -> str:
        if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
            return f"no answer within {self.config.startup_timeout:g} s (startup_timeout)" + self.stderr_tail()
        if isinstance(exc, FileNotFoundError):
            return f"cannot run `{self.config.command}`: no such program" + (
                "" if os.sep in self.config.command else " on PATH")
        return describe_error(exc) + self.stderr_tail()


class _StdioTransport:
    """The SDK's stdio context manager as a Transport (the Client would build it with stderr on our terminal)."""

    def __init__(self, manager: Any):
        self.manager = manager

    async def __aenter__(self) -> Any:
        return await self.manager.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.manager.__aexit__(*exc)


class _HttpTransport(_StdioTransport):
    """Streamable HTTP with our headers; closes the HTTP client it was given."""

    def __init__(self, manager: Any, http: Any):
        super().__init__(manager)
        self.http = http

    async def __aenter__(self) -> Any:
        await self.http.__aenter__()
        try:
            return await self.manager.__aenter__()
        except BaseException:
            await self.http.__aexit__(None, None, None)
            raise

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self.manager.__aexit__(*exc)
        finally:
            await self.http.__aexit__(None, None, None)


def describe_error(exc: BaseException) -> str:
    """One line for a failure inside the SDK (exception groups unwrapped to their first cause)."""
    while getattr(exc, "exceptions", None):  # an ExceptionGroup from a task group
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    name = type(exc).__name__
    text = str(exc).strip()
    if name in ("ClosedResourceError", "BrokenResourceError", "EndOfStream", "BrokenPipeError", "ConnectionError") \
            or (name == "MCPError" and "connection closed" in text.lower()):
        return CLOSED
    if name == "ConnectError":
        return f"cannot connect: {text or name}"
    if name == "MCPError":
        return f"MCP error: {text}"
    if name == "ValidationError":
        return f"the server sent something that is not valid MCP: {text.splitlines()[0] if text else name}"
    return f"{text} ({name})" if text else name
