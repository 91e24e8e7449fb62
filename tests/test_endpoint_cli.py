"""The endpoint flags on the CLI, masked keys, and the loop with a server that streams reasoning."""

import json

from conftest import cli_env, run_cli
from openai_stub import StubServer, chunk, sse

from clovercode.agent.events import RecordingSink
from clovercode.backends.endpoint import EndpointBackend, EndpointOptions
from clovercode.ground.config import load_config
from clovercode.executors.select import make_executor
from clovercode.wiring.session import Session


def test_repl_talks_to_the_endpoint_given_on_the_root_command(calc_repo):
    with StubServer(["clover"]) as stub:
        stub.script.append(sse([chunk({"reasoning_content": "Looking at calc."}),
                                chunk({"content": "It computes the mean of a list."}, "stop")]))
        proc = run_cli("--endpoint", stub.url, "--api-key", "key-1", "--sandbox", "none", "-C", str(calc_repo),
                       input="what does calc.py do?\n/exit\n")
        assert proc.returncode == 0, proc.stderr
        assert "It computes the mean of a list." in proc.stdout
        sent = stub.posts[0]
    assert sent["headers"]["Authorization"] == "Bearer key-1"
    assert sent["body"]["messages"][-1] == {"role": "user", "content": "what does calc.py do?"}
    assert [t["function"]["name"] for t in sent["body"]["tools"]] == sorted(t["function"]["name"] for t in sent["body"]["tools"])


def test_config_show_masks_both_api_keys(calc_repo):
    env = cli_env(CLOVERCODE_API_KEY="client-secret", CLOVERCODE_SERVE_API_KEY="server-secret")
    text = run_cli("config", "show", "-C", str(calc_repo), env=env)
    shown = run_cli("config", "show", "--json", "-C", str(calc_repo), env=env)
    for proc in (text, shown):
        assert proc.returncode == 0
        assert "secret" not in proc.stdout
    values = json.loads(shown.stdout)
    assert values["api_key"]["value"] == "***" and values["serve.api_key"]["value"] == "***"
    assert values["endpoint_retries"] == {"value": 4, "source": "default"}


def test_streamed_reasoning_becomes_one_think_block_in_the_turn(tmp_path):
    with StubServer(["clover"]) as stub:
        stub.script.append(sse([chunk({"reasoning_content": "first "}), chunk({"reasoning_content": "then"}),
                                chunk({"content": "Done."}),
                                chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "finish",
                                                                                            "arguments": "{\"summary\": \"ok\"}"}}]}),
                                chunk({}, "tool_calls")]))
        cfg = load_config(tmp_path, {}, {"sandbox": "none"})
        backend = EndpointBackend(EndpointOptions(stub.url, model="clover", retries=0))
        sink = RecordingSink()
        result = Session(tmp_path, cfg, backend, make_executor(cfg), interactive=False).run_task("do it", sink)
    [turn] = sink.of("model_turn")
    assert turn["raw"] == "<think>first then</think>Done."
    assert (turn["reasoning"], turn["content"]) == ("first then", "Done.")
    assert result.stop.value == "finished" and result.summary == "ok"
