"""MCP servers for the tests, written with the official SDK.

    python mcp_test_server.py KIND [PORT]     KIND: good | badschema | exit | silent | gated | tasks; PORT: streamable HTTP

gated: the good server, once the file $GATE_FILE exists (a slow start the test ends when it wants);
tasks: the good server with `add` declared task-only (execution.taskSupport "required", MCP 2025-11-25).

Every call that reaches the server is appended to $CALLS_FILE, so a test can see that an invalid
call never arrived.
"""

from __future__ import annotations

import base64
import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ImageContent


def record(name: str, **args: object) -> None:
    path = os.environ.get("CALLS_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{name} {args}\n")


def good_server() -> MCPServer:
    server = MCPServer("test-tools", log_level="WARNING")

    @server.tool(description="Add two whole numbers and return the sum.")
    def add(a: int, b: int) -> int:
        record("add", a=a, b=b)
        return a + b

    @server.tool(description="Repeat a text n times.")
    def repeat(text: str, times: int = 1) -> str:
        record("repeat", text=text, times=times)
        return text * times

    @server.tool(description="Always fails.")
    def fail(reason: str) -> str:
        record("fail", reason=reason)
        raise RuntimeError(reason)

    @server.tool(description="Sleeps for a while.")
    def sleep(seconds: float) -> str:
        record("sleep", seconds=seconds)
        time.sleep(seconds)
        return "slept"

    @server.tool(description="Exits the server process in the middle of the call.")
    def crash() -> str:
        record("crash")
        print("test server: crashing on purpose", file=sys.stderr, flush=True)
        os._exit(3)

    @server.tool(description="Returns a tiny PNG.")
    def picture() -> list:
        return [ImageContent(type="image", data=base64.b64encode(b"\x89PNG" + b"0" * 96).decode(), mime_type="image/png")]

    @server.tool(description="Adds the tool `late` and tells the client the list changed.")
    async def grow(ctx: Context, how: str = "both") -> str:
        record("grow", how=how)

        def late(word: str) -> str:
            """A tool that appeared after start-up."""
            return word.upper()

        server.add_tool(late, name="late", description="Upper-cases a word (added at run time).")
        if how in ("both", "listen"):
            await ctx.notify_tools_changed()  # 2026-era clients (subscriptions/listen)
        if how in ("both", "notification"):
            try:
                await ctx.request_context.session.send_tool_list_changed()  # notifications/tools/list_changed
            except Exception:  # noqa: BLE001 - not on this protocol version
                pass
        return "grown"

    return server


def bad_schema_server() -> MCPServer:
    server = MCPServer("bad-schema", log_level="WARNING")

    @server.tool(description="Fine.")
    def fine(x: int) -> int:
        return x

    @server.tool(description="Its schema is broken below.")
    def broken(x: int) -> int:
        return x

    original = server.list_tools

    async def list_tools():  # the SDK derives valid schemas; break one the way a buggy server would
        tools = await original()
        for tool in tools:
            if tool.name == "broken":
                tool.input_schema = {"type": "object", "properties": {"x": {"type": "bogus"}}}
        return tools

    server.list_tools = list_tools  # type: ignore[method-assign]
    return server


def tasks_server() -> MCPServer:
    from mcp.types import ToolExecution

    server = good_server()
    original = server.list_tools

    async def list_tools():  # what server-everything's simulate-research-query declares
        tools = await original()
        for tool in tools:
            if tool.name == "add":
                tool.execution = ToolExecution(task_support="required")
        return tools

    server.list_tools = list_tools  # type: ignore[method-assign]
    return server


def wait_for_gate() -> None:
    gate = os.environ["GATE_FILE"]
    deadline = time.monotonic() + 120
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)


def main() -> None:
    kind = sys.argv[1]
    if kind == "exit":
        print("test server: missing API token, giving up", file=sys.stderr, flush=True)
        sys.exit(1)
    if kind == "silent":
        time.sleep(3600)
    if kind == "gated":
        wait_for_gate()
    makers = {"good": good_server, "gated": good_server, "tasks": tasks_server, "badschema": bad_schema_server}
    server = makers[kind]()
    if len(sys.argv) > 2:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
