"""Saved sessions: the snapshot before run_end, a crashed run rebuilt from its events, ID lookup."""

import json
from pathlib import Path

import pytest

from clovercode.agent.events import RecordingSink
from clovercode.ground.messages import CallRecord, Message
from clovercode.agent.prompts import Conversation
from clovercode.context.resume import SnapshotBeforeEnd, find_saved, load_saved
from clovercode.ground.errors import UsageError


def write_events(path: Path, events: list[dict], torn_tail: bool = False) -> Path:
    text = "".join(json.dumps(e) + "\n" for e in events)
    path.write_text(text + ('{"kind": "model_tu' if torn_tail else ""))
    return path


def test_snapshot_is_written_just_before_run_end():
    conversation = Conversation([Message("user", "goal", tags=frozenset({"goal"}))])
    sink = RecordingSink()
    snap = SnapshotBeforeEnd(sink, Path("/proj"), conversation)
    snap.emit("run_start", task="goal")
    conversation.add(Message("assistant", "done"))
    snap.emit("run_end", stop_reason="finished")
    kinds = [kind for kind, _ in sink.events]
    assert kinds == ["run_start", "conversation", "run_end"]
    assert sink.of("conversation")[0] == {"root": "/proj", "messages": [
        {"role": "user", "content": "goal", "tags": ["goal"]}, {"role": "assistant", "content": "done"}]}


def test_a_crashed_run_is_rebuilt_from_its_events(tmp_path):
    path = write_events(tmp_path / "20260101-000000-crash-aaaaaa.jsonl", [
        {"kind": "run_start", "task": "fix it"},
        {"kind": "model_turn", "content": "Looking.", "reasoning": "hm", "raw": "...",
         "calls": [{"id": "c1", "name": "view_file", "arguments": {"path": "a.py"}, "valid": True}]},
        {"kind": "observation", "id": "c1", "name": "view_file", "text": "a.py (lines 1-1 of 1)"},
        {"kind": "format_error", "text": "Your reply contained no tool call."},
    ], torn_tail=True)
    saved = load_saved(path)
    assert saved.root is None and saved.goal == "fix it"
    assert saved.messages == [
        Message("user", "fix it", tags=frozenset({"goal"})),
        Message("assistant", "Looking.", "hm", (CallRecord("c1", "view_file", {"path": "a.py"}),)),
        Message("tool", "a.py (lines 1-1 of 1)", tool_call_id="c1", name="view_file"),
        Message("user", "Your reply contained no tool call.", tags=frozenset({"feedback"})),
    ]


def snapshot_file(directory: Path, name: str, root: str) -> Path:
    directory.mkdir(exist_ok=True)
    return write_events(directory / f"{name}.jsonl", [
        {"kind": "run_start", "task": name},
        {"kind": "conversation", "root": root, "messages": [{"role": "user", "content": name, "tags": ["goal"]}]},
        {"kind": "run_end"}])


def test_find_the_newest_of_this_project_or_by_id(tmp_path):
    saved = tmp_path / "saved"
    snapshot_file(saved, "20260101-000000-old-aaaaaa", "/proj")
    newest_here = snapshot_file(saved, "20260102-000000-new-bbbbbb", "/proj")
    snapshot_file(saved, "20260103-000000-elsewhere-cccccc", "/other")
    assert find_saved(saved, None, Path("/proj")) == newest_here
    assert find_saved(saved, "aaaaaa", Path("/proj")).stem == "20260101-000000-old-aaaaaa"
    assert find_saved(saved, str(newest_here), Path("/x")) == newest_here
    with pytest.raises(UsageError, match="matches 3 saved sessions"):
        find_saved(saved, "2026", Path("/proj"))
    with pytest.raises(UsageError, match="no saved session for /nowhere"):
        find_saved(saved, None, Path("/nowhere"))
    with pytest.raises(UsageError, match="none has been saved yet"):
        find_saved(tmp_path / "empty", None, Path("/proj"))
