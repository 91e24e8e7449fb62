"""Prompt assembly within the window, observation shortening and compaction, on real files and the
real loop (the model is the replay backend, given a tokenizer and a window through the optional extras)."""

import json
from pathlib import Path

import pytest
from conftest import make_git_repo

from clovercode.actions.context import ToolContext
from clovercode.actions.toolbox import Toolbox
from clovercode.agent.budget import Limits
from clovercode.agent.events import RecordingSink
from clovercode.agent.loop import Agent
from clovercode.ground.messages import CallRecord, Message
from clovercode.agent.prompts import Conversation
from clovercode.backends.base import GenerationParams
from clovercode.backends.replay import ReplayBackend
from clovercode.ground.config import load_config
from clovercode.context.assemble import ContextAssembler
from clovercode.context.compaction import edited_paths, head_tail, shorten_observations
from clovercode.context.prompt import Budget, ContextPrompt
from clovercode.context.tokens import estimate_tokens, window_for
from clovercode.ground.errors import ConfigError
from clovercode.executors.local import LocalExecutor

ROOT_RULES = "# Rules\nRun `make check` before finishing. ROOT-INSTRUCTION-MARKER\n"
PARSER_RULES = "Parser code must stay allocation-free. PARSER-INSTRUCTION-MARKER\n"
GOAL = "Fix the tokenizer bug in src/parser/lexer.py: GOAL-MARKER numbers with exponents are split in two."


def words(text: str) -> int:
    return len(text.split()) + text.count("\n")


def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src" / "parser").mkdir(parents=True)
    (root / "AGENTS.md").write_text(ROOT_RULES)
    (root / "src" / "parser" / "AGENTS.md").write_text(PARSER_RULES)
    (root / "src" / "parser" / "lexer.py").write_text("def lex(text):\n    return text.split()\n")
    (root / "src" / "util.py").write_text("def noise():\n    return 0\n")
    return make_git_repo(root)


def cfg(**values):
    return load_config(None, {}, {f"context.{k}": v for k, v in values.items()})


def make_prompt(root: Path, window: int, *, count=estimate_tokens, exact=False, sink=None, **settings) -> ContextPrompt:
    budget = Budget.from_config(cfg(**settings), window, 256)
    return ContextPrompt(root=root, base_system="You are a test agent.", repo_map="src/parser/lexer.py:\n    1: def lex(text):",
                         tools_tokens=300, count=count, exact=exact, budget=budget, sink=sink)


def long_session(root: Path, steps: int = 30) -> Conversation:
    """A goal, a plan, many big observations, and edits to lexer.py (the file on disk is the latest)."""
    conversation = Conversation()
    conversation.add(Message("user", GOAL, tags=frozenset({"goal"})))
    for step in range(steps):
        calls = (CallRecord(f"c{step}", "view_file", {"path": "src/parser/lexer.py"}),)
        if step == 3:
            calls = (CallRecord("plan", "update_plan", {"steps": ["reproduce", "fix exponent lexing", "PLAN-MARKER test"]}),)
        if step in (10, 20):
            calls = (CallRecord(f"e{step}", "edit_file", {"path": "src/parser/lexer.py", "old_text": "a", "new_text": "b"}),)
        conversation.add(Message("assistant", f"Step {step}: looking at the lexer again.", tool_calls=calls))
        body = "\n".join(f"{step}:{line} token stream line with some words in it" for line in range(120))
        conversation.add(Message("tool", f"output of step {step}\n{body}", tool_call_id=calls[0].id, name=calls[0].name))
    (root / "src" / "parser" / "lexer.py").write_text(
        "import re\n\nNUMBER = re.compile(r'\\d+(\\.\\d+)?([eE][-+]?\\d+)?')  # LATEST-CONTENT-MARKER\n")
    return conversation


def prompt_tokens(prompt: ContextPrompt, messages: list[Message]) -> int:
    return sum(prompt.message_tokens(m) for m in messages) + prompt.tools_tokens


def test_after_compaction_goal_instructions_plan_and_edited_files_remain_and_it_fits(tmp_path):
    root = project(tmp_path)
    conversation = long_session(root)
    sink = RecordingSink()
    prompt = make_prompt(root, 8000, sink=sink)
    messages = prompt.build(conversation)

    assert prompt.compactions == 1 and sink.of("context")[0]["action"] == "compacted"
    assert prompt_tokens(prompt, messages) <= prompt.limit
    everything = "\n".join(m.content for m in messages)
    system = messages[0].content
    assert ROOT_RULES.strip() in system and PARSER_RULES.strip() in system  # verbatim, root and touched dir
    assert GOAL in [m.content for m in messages]  # the goal, verbatim
    assert "PLAN-MARKER" in everything
    assert "LATEST-CONTENT-MARKER" in everything  # the file as it is on disk now
    assert "called view_file" in everything  # the summary of what was cut
    assert conversation.messages[-1].content.startswith("output of step 29")  # the latest turn stays verbatim
    # the compacted conversation is what later steps build on
    assert len(conversation.messages) < 61 and prompt.build(conversation) and prompt.compactions == 1


def test_compaction_repeats_and_carries_the_earlier_summary(tmp_path):
    root = project(tmp_path)
    conversation = long_session(root, steps=20)
    prompt = make_prompt(root, 6000)
    prompt.build(conversation)
    first_summary = next(m for m in conversation.messages if "summary" in m.tags)
    for step in range(20, 40):
        call = CallRecord(f"x{step}", "search_text", {"pattern": f"token{step}"})
        conversation.add(Message("assistant", f"Searching {step}.", tool_calls=(call,)))
        conversation.add(Message("tool", "match\n" * 400, tool_call_id=call.id, name=call.name))
        messages = prompt.build(conversation)
        assert prompt_tokens(prompt, messages) <= prompt.limit
    assert prompt.compactions >= 2
    summary = next(m for m in conversation.messages if "summary" in m.tags)
    assert first_summary.content.splitlines()[-1] in summary.content or "earlier lines of this summary omitted" in summary.content
    assert [m.content for m in conversation.messages if "goal" in m.tags] == [GOAL]
    assert "LATEST-CONTENT-MARKER" in "\n".join(m.content for m in conversation.messages)


def test_old_observations_keep_head_and_tail_recent_ones_stay_whole():
    big = "HEAD\n" + "x" * 10_000 + "\nTAIL"
    messages = []
    for i in range(5):
        messages += [Message("assistant", "", tool_calls=(CallRecord(f"c{i}", "run_command", {"command": "make"}),)),
                     Message("tool", big, tool_call_id=f"c{i}", name="run_command")]
    view = shorten_observations(messages, keep_recent=2, max_chars=1000)
    tools = [m.content for m in view if m.role == "tool"]
    assert all(len(t) < 1100 and t.startswith("HEAD") and t.endswith("TAIL") and "characters omitted" in t
               for t in tools[:3])
    assert tools[3:] == [big, big]
    assert messages[1].content == big  # a view: the conversation itself is unchanged
    assert head_tail("short", 10) == "short"


def test_below_the_threshold_nothing_is_compacted(tmp_path):
    root = project(tmp_path)
    conversation = long_session(root, steps=3)
    before = list(conversation.messages)
    prompt = make_prompt(root, 100_000)
    messages = prompt.build(conversation)
    assert conversation.messages == before and prompt.compactions == 0
    assert messages[1:] == before
    assert prompt.last.history == sum(prompt.message_tokens(m) for m in before)


def test_one_output_larger_than_the_window_is_squeezed_to_fit(tmp_path):
    root = project(tmp_path)
    conversation = Conversation()
    conversation.add(Message("user", GOAL, tags=frozenset({"goal"})))
    call = CallRecord("c1", "run_command", {"command": "cat huge.log"})
    conversation.add(Message("assistant", "", tool_calls=(call,)))
    conversation.add(Message("tool", "log line\n" * 20_000, tool_call_id="c1", name="run_command"))
    prompt = make_prompt(root, 4000, recent_observations=5)
    messages = prompt.build(conversation)
    assert prompt_tokens(prompt, messages) <= prompt.limit
    assert GOAL in [m.content for m in messages]
    latest = messages[-1]  # the output the model just asked for: shortened, not summarised away
    assert latest.role == "tool" and latest.content.startswith("log line") and "characters omitted" in latest.content


def test_forced_compaction_shrinks_the_history(tmp_path):
    root = project(tmp_path)
    conversation = long_session(root, steps=12)
    prompt = make_prompt(root, 100_000)
    before, after = prompt.compact_now(conversation)
    assert after < before
    assert GOAL in [m.content for m in conversation.messages]
    assert "LATEST-CONTENT-MARKER" in "\n".join(m.content for m in conversation.messages)


def test_edited_paths_newest_first_including_patches():
    messages = [
        Message("assistant", tool_calls=(CallRecord("1", "edit_file", {"path": "a.py", "old_text": "", "new_text": ""}),)),
        Message("assistant", tool_calls=(CallRecord("2", "apply_patch", {"patch": "*** Begin Patch\n*** Update File: b.py\n"}),)),
        Message("assistant", tool_calls=(CallRecord("3", "view_file", {"path": "c.py"}),)),
        Message("user", "carried over", tags=frozenset({"files", "file:d.py"})),
    ]
    assert edited_paths(messages) == ["d.py", "b.py", "a.py"]


def test_budget_settings_are_checked():
    with pytest.raises(ConfigError, match="at most 1"):
        Budget.from_config(cfg(compact_at=1.5), 10_000, 100)
    with pytest.raises(ConfigError, match="smaller than"):
        Budget.from_config(cfg(compact_at=0.5, keep_recent=0.6), 10_000, 100)
    assert Budget.from_config(cfg(), 8000, 4096).reserve == 2000  # the reply may not take over the window


class CountingReplay(ReplayBackend):
    """The replay backend plus the optional extras: a tokenizer (words) and a window. Records prompts."""

    def __init__(self, path: Path, window: int):
        super().__init__(path)
        self.context_window = window
        self.prompts: list[list[Message]] = []

    def count_tokens(self, text: str) -> int:
        return words(text)

    def generate(self, messages, tools, params):
        self.prompts.append(list(messages))
        return super().generate(messages, tools, params)


def tool_turn(name: str, **arguments) -> dict:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in arguments.items())
    return {"text": f"Working.\n<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"}


def test_the_loop_gets_prompts_that_fit_the_models_window(tmp_path):
    root = project(tmp_path)
    (root / "big.txt").write_text("\n".join(f"line {i} of a long file with many words" for i in range(3000)))
    turns = [tool_turn("view_file", path="big.txt", start_line=1 + 300 * i, end_line=300 * (i + 1)) for i in range(8)]
    turns.append(tool_turn("view_file", path="src/parser/lexer.py"))  # read before edit
    turns.append(tool_turn("edit_file", path="src/parser/lexer.py", old_text="text.split()", new_text="text.split(' ')"))
    turns.append(tool_turn("finish", summary="done"))
    replay = tmp_path / "turns.jsonl"
    replay.write_text("".join(json.dumps(t) + "\n" for t in turns))
    backend = CountingReplay(replay, window=6000)
    config = load_config(None, {}, {"max_steps": 20})
    sink = RecordingSink()
    conversation = Conversation()
    specs = Toolbox(ToolContext(root, LocalExecutor())).specs
    prompt = ContextAssembler(root, config, {"HOME": str(tmp_path)}, False).prompt_for(
        conversation, GOAL, specs, backend, 512, sink)
    assert prompt.exact and prompt.budget.window == 6000
    agent = Agent(backend, Toolbox(ToolContext(root, LocalExecutor())), prompt, Limits(max_steps=20),
                  GenerationParams(max_new_tokens=512), sink)
    result = agent.run(conversation, GOAL)
    assert result.stop.value == "finished"
    for messages in backend.prompts:
        assert sum(prompt.message_tokens(m) for m in messages) + prompt.tools_tokens <= prompt.limit
    assert [e["action"] for e in sink.of("context")][:1] == ["repo_map"]
    assert any(e["action"] == "compacted" for e in sink.of("context"))
    last = backend.prompts[-1]
    assert GOAL in [m.content for m in last] and ROOT_RULES.strip() in last[0].content
    assert "text.split(' ')" in "\n".join(m.content for m in last)  # lexer.py's latest content survived
    assert "# Repository map" in last[0].content


def test_window_comes_from_the_setting_capped_by_the_model():
    class Model:
        context_window = 8192

    assert window_for(Model(), 0) == 8192
    assert window_for(Model(), 4096) == 4096
    assert window_for(Model(), 100_000) == 8192
    assert window_for(object(), 0) == 32768


def issue_of(chars: int) -> str:
    line = "Traceback line of a long pasted log, with varied text 0123456789 abcdef\n"
    return "mean() is wrong\n\n" + line * (chars // len(line))


def test_compaction_never_makes_the_history_bigger(tmp_path):
    """Small steps, then one big output: the summary and the re-read edited file outweigh the steps they replace."""
    root = project(tmp_path)
    conversation = Conversation()
    conversation.add(Message("user", GOAL + "\n" + "detail of the report " * 900, tags=frozenset({"goal"})))
    for step in range(19):
        call = CallRecord(f"e{step}", "edit_file", {"path": "src/parser/lexer.py", "old_text": "a", "new_text": "b"})
        conversation.add(Message("assistant", f"Edit {step}.", tool_calls=(call,)))
        conversation.add(Message("tool", "ok", tool_call_id=call.id, name=call.name))
    call = CallRecord("big", "run_command", {"command": "make test"})
    conversation.add(Message("assistant", "Testing.", tool_calls=(call,)))
    conversation.add(Message("tool", "test output line\n" * 1000, tool_call_id="big", name="run_command"))
    (root / "src" / "parser" / "lexer.py").write_text("x = 1  # a line of the edited file\n" * 170)
    sink = RecordingSink()
    prompt = make_prompt(root, 12_000, sink=sink)
    before = sum(prompt.message_tokens(m) for m in prompt.view(conversation.messages))
    prompt.build(conversation)
    after = sum(prompt.message_tokens(m) for m in prompt.view(conversation.messages))
    assert after <= before
    assert all(event["after"] < event["before"] for event in sink.of("context") if event["action"] == "compacted")


def test_a_120k_character_task_is_cut_to_the_window_with_a_warning_not_compacted_bigger(tmp_path):
    root = project(tmp_path)
    conversation = Conversation()
    task = issue_of(120_000)
    conversation.add(Message("user", task, tags=frozenset({"goal"})))
    sink = RecordingSink()
    prompt = make_prompt(root, 32_768, sink=sink)
    messages = prompt.build(conversation)
    assert prompt_tokens(prompt, messages) <= prompt.limit
    [goal] = [m for m in conversation.messages if "goal" in m.tags]
    assert goal.content.startswith("mean() is wrong") and goal.content.endswith(task[-200:])  # head and tail kept
    assert "characters of the task were cut here to fit the model's context window" in goal.content
    [warning] = sink.of("warning")
    assert "was cut, with a note where" in warning["text"] and "32,768-token context window" in warning["text"]
    assert all(event["after"] < event["before"] for event in sink.of("context") if event["action"] == "compacted")
    prompt.build(conversation)
    assert len(sink.of("warning")) == 1  # cut once, in the conversation itself


def test_tools_and_instructions_that_alone_fill_the_window_are_said_once_before_the_turn(tmp_path):
    # clover-tiny's tool schemas alone were 129 % of its window, with no word before the turn (issue 49)
    sink = RecordingSink()
    prompt = make_prompt(project(tmp_path), window=400, sink=sink)
    conversation = Conversation()
    conversation.add(Message("user", GOAL, tags=frozenset({"goal"})))
    prompt.build(conversation)
    prompt.build(conversation)
    said = [e for e in sink.events if e[0] == "warning" and "before any task" in e[1]["text"]]
    assert len(said) == 1, sink.events
    text = said[0][1]["text"]
    assert "the tool schemas" in text and "300 tokens" in text and "AGENTS.md" in text
    roomy = RecordingSink()
    make_prompt(project(tmp_path / "b"), window=32768, sink=roomy).build(conversation)
    assert not [e for e in roomy.events if e[0] == "warning"]
