"""Hostile model files: a chat template is someone else's code and a GGUF header can lie.

A template runs with a time limit and a size limit on everything it builds (engine/template.py); a
GGUF whose counts cannot be true is refused before its reader believes them. Each ends as a model
error naming the file and the reason (exit 5), fast and without the memory the attack asked for."""

from __future__ import annotations

import struct
import time
import tracemalloc
from pathlib import Path

import pytest
from conftest import cli_env, run_cli

from clovercode.engine.template import Limits, TemplateLimit, chat_variables, render
from clovercode.ground.errors import ExitCode, ModelUnavailable
from clovercode.trust.models import check_gguf

CONVERSATION = [{"role": "user", "content": "hi"}]
ATTACKS = {
    "nested loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "a gigabyte string": "{{ 'x' * 1000000000 }}",
    "a string that doubles": "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
                             "{% endfor %}{{ ns.s | length }}",
    "a wide filter": "{{ 'x' | center(1000000000) }}",
    "a wide format": "{{ '%1000000000s' % 'x' }}",
    "a wide method": "{{ 'x'.ljust(1000000000) }}",
    "a huge power": "{{ 10 ** 100000000 }}",
    "a replace that multiplies": "{{ ('x' * 100000).replace('x', 'x' * 100000) }}",
    "too much output": "{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}",
    # issue 45: one C-level operation each, past the old checks (1-2 GB or 60-70 s before refusal)
    "a %-precision": "{{ '%.999999999d' % 1 }}",
    "a format filter": "{{ '%999999999d' | format(1) }}",
    "a replace filter": "{{ ('x' * 900000) | replace('x', 'x' * 1000) }}",
    "a join filter": "{{ (['x' * 900000] * 1000) | join }}",
    "a nested width": "{{ '{:{}{}}'.format('x', 9999, 99999) }}",
    "a power of a power": "{{ (9 ** 4096) ** 4096 }}",
    "a tilde join": "{% set s = 'x' * 900000 %}{{ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s }}",
    "a padded batch": "{{ [1] | batch(900000000, 'x') | list }}",
    "a list literal written out": "{% set s = 'x' * 900000 %}{{ [s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s] }}",
}


@pytest.mark.parametrize("source", ATTACKS.values(), ids=ATTACKS.keys())
def test_a_hostile_template_stops_fast_and_small(source):
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(TemplateLimit):
            render(source, {"messages": CONVERSATION}, Limits(chars=1_000_000, seconds=0.3))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 2
    assert peak < 64 * 2**20


TRACED = """
import sys, time
from clovercode.engine.template import Limits, TemplateLimit, render

def greedy(frame, event, arg):  # like coverage.py's C tracer: puts itself back on every call
    if event == "call":
        sys.settrace(greedy)
    return None

sys.settrace(greedy)
started = time.monotonic()
try:
    render(%r, {"messages": []}, Limits(chars=1_000_000, seconds=0.3))
except TemplateLimit as exc:
    print("stopped:", exc, round(time.monotonic() - started, 1))
"""


def test_a_tracer_that_puts_itself_back_does_not_lift_the_time_limit():
    """The deadline was a trace function: coverage.py's tracer replaced it, and the nested loops ran for hours."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", TRACED % ATTACKS["nested loops"]], capture_output=True, text=True,
                          timeout=60, env=cli_env())
    assert "stopped: the template ran past its time limit of 0.3 s" in proc.stdout, proc.stdout + proc.stderr


def test_a_deadline_that_fires_as_the_render_ends_raises_nothing_afterwards():
    """Renders about as long as their deadline: each ends whole or with the time limit, and no raise
    the timer fired at the edge comes out later, in code that has nothing to do with templates."""
    loop = "{% for i in range(300) %}{{ i }}{% endfor %}"
    outcomes = set()
    for attempt in range(300):
        try:
            render(loop, {"messages": CONVERSATION}, Limits(seconds=0.0001 * (attempt % 10 + 1)))
            outcomes.add("whole")
        except TemplateLimit as exc:
            assert "time limit" in str(exc)
            outcomes.add("stopped")
        total = sum(range(20_000))  # bytecodes enough for a pending raise to land, had one been left
    assert total == 199990000 and outcomes <= {"whole", "stopped"}  # which of them depends on the load


def test_a_deadline_that_fires_while_its_timer_is_starting_is_the_time_limit(monkeypatch):
    """Under load a new thread can run its whole short wait before Thread.start() returns in the thread
    that started it: the raise must not land inside the threading module (it once came out as a KeyError
    from threading's own bookkeeping, reported as the template's error). Here start() is made slow."""
    import threading

    if not hasattr(threading, "_start_new_thread"):
        pytest.skip("this Python starts threads through another call")
    real = threading._start_new_thread

    def slow_start(*args):
        started = real(*args)
        time.sleep(0.05)  # the new thread runs meanwhile, as a loaded machine lets it
        return started

    monkeypatch.setattr(threading, "_start_new_thread", slow_start)
    loop = "{% for i in range(100000) %}{{ i }}{% endfor %}"
    with pytest.raises(TemplateLimit, match="time limit"):
        render(loop, {"messages": CONVERSATION}, Limits(seconds=0.001))


def test_an_honest_template_renders_as_transformers_renders_it():
    from transformers import AutoTokenizer

    from clovercode.engine.sources import tiny_model_dir

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir())
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x" * 5000},
                {"role": "assistant", "content": "ok", "reasoning_content": "think"}, {"role": "user", "content": "go"}]
    assert render(tokenizer.chat_template, chat_variables(tokenizer, messages, None, enable_thinking=False)) == \
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, enable_thinking=False)


def _tiny_with_template(folder: Path, source: str) -> Path:
    import shutil

    from clovercode.engine.sources import tiny_model_dir

    folder.mkdir(parents=True)
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "model.safetensors"):
        shutil.copy(tiny_model_dir() / name, folder / name)
    (folder / "chat_template.jinja").write_text(source)
    return folder


def lying_gguf(path: Path, tensors: int = 0, entries: int = 2) -> Path:
    """A GGUF whose header counts are plausible but whose token array claims 1000 strings and holds one."""
    body = b"GGUF" + struct.pack("<IQQ", 3, tensors, entries)
    for key, tail in ((b"general.architecture", struct.pack("<IQ", 8, 5) + b"llama"),
                      (b"tokenizer.ggml.tokens", struct.pack("<IIQ", 9, 8, 1000) + struct.pack("<Q", 3) + b"abc")):
        body += struct.pack("<Q", len(key)) + key + tail
    path.write_bytes(body)
    return path


def test_a_gguf_header_that_cannot_be_true_is_refused_before_reading(tmp_path):
    with pytest.raises(ModelUnavailable, match=r"claims 1,000,000,000,000 tensors"):
        check_gguf(lying_gguf(tmp_path / "m.gguf", tensors=10**12))
    with pytest.raises(ModelUnavailable, match="not a GGUF file"):
        check_gguf(tmp_path.joinpath("x.gguf").write_bytes(b"PK\x03\x04" + bytes(40)) and tmp_path / "x.gguf")
    check_gguf(lying_gguf(tmp_path / "plausible.gguf"))  # the header alone cannot tell: the reader must


@pytest.mark.parametrize("kind", ["gguf", "template", "deep config"])
def test_exec_with_a_hostile_model_file_exits_5_naming_it(tmp_path, kind):
    project = tmp_path / "project"
    project.mkdir()
    if kind == "gguf":
        model, reason = str(lying_gguf(project / "lying.gguf")), "lying.gguf could not be read as a GGUF model"
    elif kind == "template":
        model, reason = "./m", "went past its limits"
        _tiny_with_template(project / "m", ATTACKS["a gigabyte string"])
    else:  # issue 45: a 100,000-deep config.json was a RecursionError, exit 70
        model, reason = "./m", "config.json of the model in"
        _tiny_with_template(project / "m", "{{ messages }}")
        (project / "m" / "config.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    proc = run_cli("exec", "--sandbox", "none", "--model", model, "hello", cwd=project,
                   env=cli_env(CLOVERCODE_ENGINE_DEVICE="cpu"), timeout=300)
    assert proc.returncode == ExitCode.MODEL_UNAVAILABLE, proc.stderr
    assert reason in proc.stderr and "Traceback" not in proc.stderr


def test_a_prompt_that_cannot_fit_is_refused_before_it_is_tokenized():
    from clovercode.backends.base import ContextTooLong, GenerationParams
    from clovercode.backends.embedded import EmbeddedBackend
    from clovercode.engine.config import EngineConfig
    from clovercode.engine.engine import Engine
    from clovercode.engine.sources import tiny_model_dir
    from clovercode.ground.messages import Message
    from rich.console import Console

    backend = EmbeddedBackend(Engine.open(str(tiny_model_dir()), EngineConfig(device="cpu"), Console(quiet=True)))
    encoded = []
    real = backend.engine.encode
    backend.engine.encode = lambda text: encoded.append(len(text)) or real(text)  # a spy, not a fake
    huge = "x" * (2 * backend.engine.max_context * backend._max_token_chars() + 1)
    with pytest.raises(ContextTooLong, match="cannot fit"):
        backend.prepare([Message("user", huge)], [], GenerationParams(max_new_tokens=4, thinking=False))
    assert encoded == []
    backend.prepare([Message("user", "hi")], [], GenerationParams(max_new_tokens=4, thinking=False))
    assert encoded


EVERYDAY = """{%- set ns = namespace(last=-1, names=[]) -%}
{%- if tools %}{{ '# Tools\\n' + (tools | map(attribute='function') | map(attribute='name') | join(', ')) }}
{% for tool in tools %}{{ tool | tojson(indent=2) }}{{ '\\n' }}{% endfor %}{% endif -%}
{%- for message in messages[::-1] %}{% if message.role == 'user' and ns.last < 0 %}{% set ns.last = loop.index0 %}{% endif %}{% endfor -%}
{%- for message in messages -%}
{%- set content = message.content if message.content is string else '' -%}
{%- if '</think>' in content %}{% set content = content.split('</think>')[-1].lstrip('\\n') %}{% endif -%}
<|{{ message['role'] }}|>{{ content | trim }} {{ '%-6s|%3d' % (message.role[:4], loop.index) }} {{ '{0}:{1:>4}'.format(loop.index0, content | length) }}
{{ content.replace('hi', 'hello') | indent(2) | center(30) | truncate(40) }} {{ message.role ~ '/' ~ loop.length }}
{%- endfor %}
{{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ [1, 2.5, 3] | sum }} {{ (7 / 2) | round | int }}
{{ {'b': 1, 'a': 2} | dictsort | map('first') | join('') }} {{ [3, 1, 3] | unique | list }} {{ 2 ** 10 }} {{ -3 | abs }}
{%- if add_generation_prompt %}<|assistant|>{% endif %}"""


def test_everyday_template_constructs_render_as_jinjas_own_sandbox_renders_them():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    variables = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"},
                              {"role": "assistant", "content": "<think>x</think>\n\nok"}, {"role": "user", "content": "go"}],
                 "tools": [{"type": "function", "function": {"name": "view_file", "parameters": {"type": "object"}}}],
                 "add_generation_prompt": True}
    plain = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    plain.filters["tojson"] = lambda v, indent=None: __import__("json").dumps(v, indent=indent)
    assert render(EVERYDAY, variables) == plain.from_string(EVERYDAY).render(**variables)


def test_what_is_off_the_list_is_refused_or_absent():
    for source in ("{{ 'x'.encode('utf-8') }}", "{{ 'x'.translate({}) }}", "{{ ['a'] | sum(start='') }}",
                   "{{ '%*d' % (5, 1) }}", "{{ '{:!<{w}}'.format('x', w=3) }}"):
        with pytest.raises(TemplateLimit):
            render(source, {})
    import jinja2

    for source in ("{{ 2.0 ** 99999 }}", "{{ 'x' | int + [] }}", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"):
        with pytest.raises(jinja2.TemplateError, match="the template raised"):
            render(source, {})  # the template's own failure: a template error (exit 5), never a traceback
    with pytest.raises(jinja2.UndefinedError):
        render("{{ lipsum(100000000) }}", {})  # lorem ipsum is not among the globals
    with pytest.raises(jinja2.TemplateAssertionError):
        render("{{ 'x' | pprint }}", {})  # nor pprint among the filters


def test_model_json_is_parsed_with_a_depth_limit(tmp_path):
    from clovercode.engine.sources import read_json_object
    from clovercode.engine.weightplan import read_header
    from clovercode.ground import boundedjson

    deep = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert boundedjson.depth('{"a": "[[[[[", "b": [[1]]}') == 3  # brackets inside strings do not count
    with pytest.raises(boundedjson.TooDeep):
        boundedjson.loads(deep)
    for name in ("tokenizer_config.json", "generation_config.json"):
        (tmp_path / name).write_text(deep)
        with pytest.raises(ModelUnavailable, match=f"{name} of the model in .* nests more than 128 levels"):
            read_json_object(tmp_path / name)
    header = deep.encode()
    (tmp_path / "w.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    assert read_header(tmp_path / "w.safetensors") is None  # not a safetensors file, and no RecursionError
