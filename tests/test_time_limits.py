"""``--max-time`` holds inside a step (issue 35): at the deadline a running command is killed and a
streamed model turn is cut, the way Esc / Ctrl-C cut them, and the run stops as ``max_time`` with
its exit code (3, gave up). Before: `exec --max-time 2` over a `sleep 30` took 31 s; `--max-time 3`
over a 30 s streamed reply ended `answered` after 33 s."""

from __future__ import annotations

import json
import shutil
import time

from conftest import run_cli
from conftest import tool_call_text as call
from conftest import write_replay as replay
from openai_stub import StubServer, chunk, sse

from clovercode.agent.events import RecordingSink
from clovercode.backends.endpoint import EndpointBackend, EndpointOptions
from clovercode.ground.config import load_config
from clovercode.executors.select import make_executor
from clovercode.wiring.session import Session


def test_a_sandboxed_command_is_cut_at_the_deadline(tmp_path):
    model = replay(tmp_path / "m.jsonl", call("run_command", command="sleep 30"), call("finish", summary="slept"))
    sandbox = "workspace-write" if shutil.which("bwrap") else "none"
    began = time.monotonic()
    proc = run_cli("exec", "--json", "--sandbox", sandbox, "--max-time", "5", "--model", f"replay:{model}", "wait",
                   cwd=tmp_path, timeout=60)
    took = time.monotonic() - began
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    done = events[-1]
    assert done["type"] == "run_completed" and done["stop_reason"] == "max_time", proc.stdout + proc.stderr
    assert proc.returncode == done["exit_code"] == 3
    assert done["seconds"] < 10 and took < 30, (done["seconds"], took)  # the command alone takes 30 s
    [observed] = [e for e in events if e["type"] == "observation"]
    assert not observed["ok"] and "time limit" in observed["text"]


def test_a_streamed_turn_is_cut_at_the_deadline(tmp_path):
    words = [chunk({"content": f"word{i} "}) for i in range(30)]
    with StubServer(["clover"]) as stub:
        stub.script.append(sse(words + [chunk({}, "stop")], pause=1.0))
        cfg = load_config(tmp_path, {}, {"sandbox": "none", "max_time": 3})
        backend = EndpointBackend(EndpointOptions(stub.url, model="clover", retries=0))
        sink = RecordingSink()
        began = time.monotonic()
        result = Session(tmp_path, cfg, backend, make_executor(cfg), interactive=True).run_task("talk", sink)
        took = time.monotonic() - began
    assert result.stop.value == "max_time" and "time limit" in result.detail
    assert took < 8, took
