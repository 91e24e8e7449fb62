"""The parts of `clovercode acp` one at a time: stop reasons, prompt content, permission answers,
event → update mapping, history replay, the editor-buffer file access, cancelling a turn's thread."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from acp.schema import AllowedOutcome, DeniedOutcome, SessionNotification, TextContentBlock
from clovercode.acp.clientfs import ClientFiles, WriteLog
from clovercode.acp.content import prompt_text
from clovercode.acp.history import history_updates
from clovercode.acp.permissions import answer
from clovercode.acp.turns import STOP_REASONS, Turn, stop_reason
from clovercode.acp.updates import UpdateMapper
from clovercode.actions.approval import ALWAYS, CANCEL, NO, YES, Reply
from clovercode.actions.context import ToolError
from clovercode.actions.fileio import DiskFiles
from clovercode.agent.budget import StopReason
from clovercode.errors import UsageError
from clovercode.messages import CallRecord, Message
from clovercode.trust.projectview import ProjectView
from conftest import run_cli, tool_call_text


def test_every_stop_reason_has_an_honest_acp_answer() -> None:
    assert {reason.value: stop_reason(reason.value) for reason in StopReason} == {
        "finished": "end_turn", "answered": "end_turn", "max_steps": "max_turn_requests", "max_time": "end_turn",
        "max_tokens": "max_tokens", "format_errors": "end_turn", "repeated_failures": "end_turn",
        "interrupted": "cancelled", "model_error": None}  # a model failure is an error answer
    assert set(STOP_REASONS.values()) <= {"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"}


def test_prompt_blocks_become_the_task() -> None:
    blocks = [TextContentBlock(type="text", text="explain this"),
              SimpleNamespace(type="resource_link", uri="file:///p/a.py"),
              SimpleNamespace(type="resource", resource=SimpleNamespace(uri="file:///p/b.py", text="x = 1"))]
    assert prompt_text(blocks) == ("explain this\n\n(attached: file:///p/a.py)\n\n"
                                   "<attached uri='file:///p/b.py'>\nx = 1\n</attached>")
    with pytest.raises(UsageError, match="image"):
        prompt_text([SimpleNamespace(type="image")])


def test_permission_answers_map_onto_the_repls() -> None:
    chosen = {o: answer(AllowedOutcome(outcome="selected", option_id=o)) for o in ("allow-once", "allow-always", "reject-once", "odd")}
    assert chosen == {"allow-once": Reply(YES), "allow-always": Reply(ALWAYS), "reject-once": Reply(NO), "odd": Reply(NO)}
    assert answer(DeniedOutcome(outcome="cancelled")) == Reply(CANCEL)


def test_stream_markup_is_hidden_and_a_call_becomes_a_tool_call_with_its_diff(tmp_path: Path) -> None:
    sent: list[dict] = []
    writes = WriteLog(DiskFiles(ProjectView(tmp_path)))
    mapper = UpdateMapper(tmp_path, sent.append, writes, prefix="t1-")
    mapper.emit("step_start", step=1)
    for piece in ("<think>plan</think>I will edit. ", tool_call_text("edit_file", path="a.txt")[:30], "…"):
        mapper.emit("text_delta", text=piece)
    mapper.emit("model_turn")
    mapper.emit("tool_call", id="call_1_1", name="edit_file", arguments={"path": "a.txt"})
    (tmp_path / "a.txt").write_text("old\n")
    writes.read(tmp_path / "a.txt", "a.txt")
    writes.write(tmp_path / "a.txt", b"new\n", None)
    mapper.emit("observation", id="call_1_1", name="edit_file", ok=True, text="Changed a.txt", data={})
    mapper.emit("observation", id="call_9_9", name="edit_file", ok=False, text="invalid", data={})  # never started
    mapper.emit("run_end", stop_reason="max_time", detail="reached the time limit (5 s)", summary=None)
    said = [(u["sessionUpdate"], u.get("content", {}).get("text") if isinstance(u.get("content"), dict) else None) for u in sent]
    assert said[:2] == [("agent_thought_chunk", "plan"), ("agent_message_chunk", "I will edit. ")]
    assert [u["sessionUpdate"] for u in sent[2:]] == ["tool_call", "tool_call_update", "agent_thought_chunk",
                                                      "agent_message_chunk"]
    assert sent[2]["toolCallId"] == "t1-call_1_1" and sent[2]["kind"] == "edit" and sent[2]["status"] == "pending"
    assert sent[3]["content"][0] == {"type": "diff", "path": str(tmp_path / "a.txt"), "oldText": "old\n", "newText": "new\n"}
    assert "invalid" in sent[4]["content"]["text"]  # the call that never started is said among the reasoning
    assert "reached the time limit" in sent[5]["content"]["text"]
    for update in sent:  # each is what the SDK's models accept
        SessionNotification.model_validate({"sessionId": "s", "update": update})


def test_a_saved_conversation_is_told_again(tmp_path: Path) -> None:
    messages = [Message("system", "rules"), Message("user", "fix it", tags=frozenset({"goal"})),
                Message("assistant", "Looking.", "hmm", (CallRecord("call_1_1", "view_file", {"path": "a.py"}),)),
                Message("tool", "a.py (lines 1-1 of 1)", tool_call_id="call_1_1", name="view_file"),
                Message("user", "format feedback", tags=frozenset({"feedback"})),
                Message("assistant", "", "", (CallRecord("call_2_1", "finish", {"summary": "Done."}),))]
    updates = list(history_updates(messages, tmp_path))
    assert [u["sessionUpdate"] for u in updates] == ["user_message_chunk", "agent_thought_chunk", "agent_message_chunk",
                                                     "tool_call", "tool_call_update", "agent_message_chunk"]
    assert updates[3]["toolCallId"] == updates[4]["toolCallId"] == "h2-call_1_1"
    assert updates[4]["status"] == "completed" and updates[-1]["content"]["text"] == "Done."



def test_editor_buffers_are_read_and_written_through_the_client(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    target.write_text("on disk\n")
    buffers = {str(target): "unsaved\r\nbuffer\r\n"}
    asked: list[tuple[str, dict]] = []

    def call(method: str, **params):
        asked.append((method, params))
        if method == "read_text_file":
            if params["path"] not in buffers:
                raise RuntimeError("no such buffer")
            return SimpleNamespace(content=buffers[params["path"]])
        buffers[params["path"]] = params["content"]

    files = ClientFiles(call, "s1", DiskFiles(ProjectView(tmp_path)))
    seen = files.read(target, "a.txt")
    assert (seen.text, seen.newline) == ("unsaved\nbuffer\n", "\r\n")
    files.write(target, seen.encode("changed\n", "a.txt"), None)
    assert buffers[str(target)] == "changed\r\n" and target.read_text() == "on disk\n"
    assert files.read(target, "a.txt").digest != seen.digest
    with pytest.raises(ToolError, match="does not exist"):
        files.read(tmp_path / "gone.txt", "gone.txt")  # the disk says whether a file exists; the editor is not asked
    assert [m for m, _ in asked] == ["read_text_file", "write_text_file", "read_text_file"]


def test_cancel_interrupts_the_turn_thread_as_ctrl_c() -> None:
    reached: list[str] = []

    def work() -> str:
        try:
            for _ in range(600):
                time.sleep(0.05)
        except KeyboardInterrupt:
            reached.append("interrupted")
            return "stopped as interrupted"  # what the loop does: it reports the interrupt as its result
        return "ran to the end"

    async def run() -> str:
        turn = Turn()
        running = asyncio.ensure_future(turn.run(work))
        while not turn.live:
            await asyncio.sleep(0.01)
        turn.cancel()
        return await running

    assert asyncio.run(run()) == "stopped as interrupted" and reached == ["interrupted"]


def test_a_bad_flag_is_a_usage_error_before_the_protocol_starts(tmp_path: Path) -> None:
    proc = run_cli("acp", "--sandbox", "sideways", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "sandbox" in proc.stderr and proc.stdout == ""


def test_without_the_acp_extra_the_command_says_what_to_install(monkeypatch) -> None:
    import sys

    from clovercode.acp.command import run_acp

    monkeypatch.setitem(sys.modules, "acp", None)  # as if the SDK were not installed
    monkeypatch.delitem(sys.modules, "clovercode.acp.server", raising=False)
    with pytest.raises(UsageError) as caught:
        run_acp({}, False)
    assert "clovercode[acp]" in str(caught.value)
