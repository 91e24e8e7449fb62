"""The table of every configuration key: type, default, allowed values and help.

This is data: config loading, ``config show`` and the docs all read it. Add a key here and it is
accepted in TOML files (dotted keys map to tables), as ``CLOVERCODE_<KEY>`` and, where a command
exposes it, as a flag. Whether a project's ``clovercode.toml`` may set it is decided in one place,
:mod:`clovercode.trust.project` (and tested for every key here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    key: str
    type: type  # str, int, float, bool, list (of strings)
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None

    @property
    def env_var(self) -> str:
        return "CLOVERCODE_" + self.key.upper().replace(".", "_").replace("-", "_")


SANDBOX_POLICIES = (  # strictest first: a project may only move to the left (trust/project.py)
    "read-only", "workspace-write", "workspace-write-network", "none")
APPROVAL_MODES = ("suggest", "auto-edit", "full-auto", "plan")

SETTINGS: tuple[Setting, ...] = (
    # model
    Setting("model", str, "clover", "Model spec: replay:FILE.jsonl, a local dir, an HF repo id, a .gguf file, or an alias."),
    Setting("endpoint", str, "", "OpenAI-compatible base URL (e.g. http://127.0.0.1:30000/v1); overrides `model` as the backend."),
    Setting("api_key", str, "", "API key for `endpoint` (prefer the CLOVERCODE_API_KEY env var)."),
    Setting("temperature", float, 0.0, "Sampling temperature; 0 is greedy.", minimum=0.0),
    Setting("top_p", float, 1.0, "Nucleus sampling mass.", minimum=0.0, maximum=1.0),
    Setting("max_new_tokens", int, 4096, "Most tokens the model may write in one turn.", minimum=1),
    Setting("thinking", bool, True, "Let the model reason in <think>…</think> before acting."),
    # loop budgets
    Setting("max_steps", int, 30, "Most model turns in one run.", minimum=1),
    Setting("max_time", float, 1800.0, "Wall-clock budget of one run in seconds (0: none).", minimum=0.0),
    Setting("max_tokens", int, 0, "Total token budget of one run, prompt + completion (0: none).", minimum=0),
    Setting("max_format_errors", int, 3, "Consecutive unparseable/invalid turns before the run stops.", minimum=1),
    Setting("max_repeats", int, 3, "Identical failing calls before the run stops (a warning comes first).", minimum=2),
    Setting("repetition_window", int, 1000, "Cut a reply whose last N characters repeat one short text (≤ N/4 chars) "
            "and tell the model; under tool_choice required the embedded engine refuses the token that would "
            "complete such a loop instead; 0 turns this off.", minimum=0),
    # tools and sandbox
    Setting("command_timeout", float, 120.0, "Seconds a run_command may take before its process tree is killed.", minimum=0.1),
    Setting("output_limit", int, 30000, "Characters of command output kept (head and tail).", minimum=200),
    Setting("sandbox", str, "workspace-write", "Sandbox policy for commands.", choices=SANDBOX_POLICIES),
    Setting("sandbox_hide", list, (), "More host paths sandboxed commands cannot read (absolute or ~/, globs allowed), "
            "on top of clovercode's own state and the credential stores it always hides."),
    Setting("sandbox_show", list, (), "Paths under ~/ sandboxed commands may read (the home is hidden but for "
            "toolchain caches; the credential stores stay hidden). Your own config only."),
    Setting("ui.theme", str, "auto", "Colours for a dark or light terminal; auto reads COLORFGBG, else asks the terminal (dark when neither says).",
            choices=("auto", "dark", "light")),
    Setting("approval", str, "suggest", "When to ask before acting (REPL; `fix` is always full-auto).", choices=APPROVAL_MODES),
    # subagents: the task tool (docs/subagents.md)
    Setting("subagents.enabled", bool, True, "Offer the model the task tool: subagents with their own context and budget."),
    Setting("subagents.max_parallel", int, 4, "Most subagents that run at once (batched on the embedded engine, "
            "concurrent requests to an endpoint); more wait their turn.", minimum=1, maximum=16),
    Setting("subagents.max_steps", int, 15, "Most model turns of one subagent (never more than max_steps).", minimum=1),
    Setting("subagents.max_tokens", int, 0, "Token budget of one subagent, prompt + completion (0: an equal share of "
            "max_tokens when that is set, else none).", minimum=0),
    Setting("subagents.max_time", float, 600.0, "Seconds one subagent may run (never more than max_time; 0: max_time).",
            minimum=0.0),
    Setting("subagents.max_depth", int, 1, "How deep subagents may nest: 1, subagents cannot start their own.",
            minimum=1, maximum=3),
    Setting("subagents.report_chars", int, 6000, "Characters of a subagent's final report the parent reads.", minimum=200),
    Setting("subagents.map_tokens", int, 1024, "Token budget of a subagent's repository map (never more than "
            "context.map_tokens).", minimum=0),
    # hooks (docs/mcp-and-hooks.md); the hooks and MCP servers themselves are tables, not settings
    Setting("hooks.max_stop_blocks", int, 3, "Times stop hooks may send the model back to work in one run; then it "
            "stops anyway, with a warning.", minimum=0),
    Setting("mcp.startup_wait", float, 5.0, "exec: seconds to wait for MCP servers before the first model call; a "
            "server not up by then joins when ready. The REPL never waits.", minimum=0.0),
    # files written by clovercode
    Setting("trajectory_dir", str, "", "Where run trajectories go (default: $XDG_STATE_HOME/clovercode/trajectories)."),
    Setting("history_file", str, "", "REPL input history (default: $XDG_STATE_HOME/clovercode/history)."),
    # `clovercode fix`: tests, branch, commit, push, pull request (docs/ci.md)
    Setting("fix.test_command", str, "", "Command that runs the project's tests after the model's edits "
            "('' detects pytest, npm test, go test, cargo test or make test; 'none' runs no tests)."),
    Setting("fix.test_rounds", int, 3, "How often failing tests are fed back to the model before the fix is "
            "committed as failing (0: run the tests once, never feed back).", minimum=0),
    Setting("fix.attempts", int, 1, "Independent attempts of each fix, side by side in their own worktrees; the one "
            "the tests prove best is committed (docs/fix.md). Each costs a whole run of model time.",
            minimum=1, maximum=16),
    Setting("fix.test_timeout", float, 900.0, "Seconds the test command may take before it is killed.", minimum=1.0),
    Setting("fix.baseline", bool, True, "Run the tests once before the model changes anything, so failures that were "
            "already there do not count against the fix (false: skip it for a huge suite; any failure then counts)."),
    Setting("fix.verify_clean", bool, True, "Before a fix is called fixed, run the tests once more in a clean temporary "
            "checkout of the commit alone (false: skip it; the verdict then says 'not verified in a clean checkout'). "
            "Only your own or a trusted project's settings can turn it off."),
    Setting("fix.branch_prefix", str, "clovercode/", "Prefix of the branch each fix is committed on."),
    Setting("fix.author", str, "", "Commit author as 'Name <email>' ('' = git's user.name/user.email, else clovercode)."),
    Setting("fix.remote", str, "origin", "Git remote that --push and --pr push the fix branch to."),
    Setting("fix.push_token", bool, False, "Push with the GitHub token (GITHUB_TOKEN / GH_TOKEN) instead of git's own "
            "credentials, so a CI checkout can keep the token out of .git/config while the model works."),
    Setting("fix.base", str, "", "Branch pull requests target ('' = the branch you are on if the remote has it, "
            "else the repository's default branch)."),
    Setting("github.api_url", str, "https://api.github.com", "GitHub REST API base URL (GitHub Enterprise: "
            "https://HOST/api/v3). Never taken from a project file: the token is sent there."),
    Setting("github.bot_login", str, "github-actions[bot]", "The login clovercode posts as on GitHub: `review` updates "
            "only this login's earlier review, and `respond` never answers its comments (no loops)."),
    Setting("github.mention", str, "@clovercode", "What a comment must contain for `respond` to act on it."),
    Setting("github.trusted_associations", list, ("OWNER", "MEMBER", "COLLABORATOR"), "Whose comments `respond` acts "
            "on (a comment's author_association); anyone else gets a log line and nothing else. User config only."),
    Setting("github.repo", str, "", "OWNER/REPO that pull requests are opened in ('' = from --github-issue, "
            "else from the remote's URL)."),
    # endpoint backend (docs/endpoint.md). Flat `endpoint_*` keys, not an `[endpoint]` table: `endpoint`
    # itself is the URL, and TOML cannot make one key both a string and a table.
    Setting("endpoint_model", str, "", "Model name to request from `endpoint` (default: --model when given, else the one model the server lists)."),
    Setting("endpoint_connect_timeout", float, 10.0, "Seconds to wait for a connection to `endpoint`.", minimum=0.1),
    Setting("endpoint_read_timeout", float, 600.0, "Seconds to wait for the next bytes of a reply (queueing and prefill on a busy server count).", minimum=1.0),
    Setting("endpoint_retries", int, 4, "Retries on HTTP 429 / 5xx and connection errors, with exponential backoff.", minimum=0),
    Setting("endpoint_stream", str, "auto", "Stream replies from `endpoint`: auto (stream; stop streaming replies with tools "
            "for a server that cannot), true, or false (llama-cpp-python's chatml-function-calling needs false).",
            choices=("auto", "true", "false")),
    Setting("endpoint_tools", str, "auto", "How tools reach the model: native (the server's chat template renders them), "
            "prompt (described in the system prompt, calls read from the text), or auto (prompt when the server's "
            "token counts show its template dropped them).", choices=("native", "prompt", "auto")),
    # clovercode serve (docs/endpoint.md)
    Setting("serve.host", str, "127.0.0.1", "Address `clovercode serve` binds to; anything but loopback exposes the model to the network."),
    Setting("serve.port", int, 8700, "Port of `clovercode serve` (0: any free port).", minimum=0, maximum=65535),
    Setting("serve.api_key", str, "", "Bearer token `clovercode serve` requires from clients (prefer the CLOVERCODE_SERVE_API_KEY env var)."),
    Setting("serve.model_name", str, "", "Model id `clovercode serve` lists and accepts (default: the --model spec)."),
    Setting("serve.max_batch", int, 8, "Requests generated together when the backend can batch; other backends run one at a time.", minimum=1),
    Setting("serve.max_queue", int, 64, "Requests allowed to wait for the model; more are refused with HTTP 429.", minimum=1),
    Setting("serve.max_request_bytes", int, 4_194_304, "Largest request body `clovercode serve` accepts (HTTP 413 beyond).", minimum=1024),
    Setting("serve.max_connections", int, 256, "Open client connections `clovercode serve` holds at once (HTTP 503 beyond).", minimum=1),
    Setting("serve.api_keys_file", str, "", "File of API keys `clovercode serve` accepts, one 'NAME KEY' a line (mode 600); "
            "each key is a tenant with its own queue share and prompt cache."),
    Setting("serve.header_timeout", float, 5.0, "Seconds a client may take to send a request's line and headers, or leave "
            "a kept-alive connection idle, before `clovercode serve` hangs up.", minimum=0.1),
    Setting("serve.max_connections_per_address", int, 64, "Open connections one client address may hold (HTTP 503 "
            "beyond; 0: no cap): reconnecting sockets from one host cannot take every slot.", minimum=0),
    Setting("serve.max_connections_per_key", int, 0, "Open connections one API key may hold (HTTP 429 beyond; 0: "
            "serve.max_connections shared evenly among the keys; no cap with one key).", minimum=0),
    Setting("serve.body_timeout", float, 30.0, "Seconds a client may take to send a whole request body "
            "(HTTP 408 beyond), however slowly it trickles.", minimum=0.1),
    Setting("serve.max_queue_per_key", int, 0, "Queue places one API key may hold (429 beyond; 0: serve.max_queue shared "
            "evenly among the keys; no limit without keys).", minimum=0),
    # REPL permissions (docs/usage.md#approvals): the user's own rules, never a project's
    Setting("permissions.allow", list, (), "Commands run without asking: 'git status *' (a prefix, honoured only "
            "for programs that run no other program) or an exact command ('rm -rf build'); added by answering 'a' "
            "at an approval, listed and removed with /permissions."),
    # repository context: repo map, instruction files, prompt budget, compaction (docs/context.md)
    Setting("context.map_tokens", int, 2048, "Token budget of the repository map in the system prompt (0: no map).", minimum=0),
    Setting("context.window", int, 0, "Context window in tokens (0: the model's own, else 32768).", minimum=0),
    Setting("context.compact_at", float, 0.75, "Share of the window past which the history is compacted (at most 1).", minimum=0.1),
    Setting("context.keep_recent", float, 0.3, "Share of the window kept verbatim as recent history when compacting.", minimum=0.05),
    Setting("context.observation_chars", int, 4000, "Older tool outputs longer than this keep only their head and tail.", minimum=200),
    Setting("context.recent_observations", int, 3, "How many of the latest tool outputs are never shortened.", minimum=0),
    Setting("context.instructions", bool, True, "Put AGENTS.md files (root and touched directories) in the system prompt."),
    Setting("context.max_file_kb", int, 512, "Source files larger than this (KiB) stay out of the repository map.", minimum=1),
    Setting("context.cache", bool, True, "Cache per-file tags between runs (keyed by path, mtime and size)."),
    Setting("context.cache_dir", str, "", "Where tag caches go (default: $XDG_CACHE_HOME/clovercode/tags)."),
    Setting("context.jobs", int, 0, "Worker processes that parse a cold tree (0: one per CPU core).", minimum=0),
    Setting("context.include_generated", bool, False, "Map vendored, generated and build-output files too (dist/, build/, vendor/, minified, linguist-generated, @generated)."),
    # engine: the embedded block-diffusion engine (docs/engine.md)
    Setting("engine.block_size", int, 0, "Tokens per diffusion block; 0: the model's own (1 = autoregressive).", minimum=0),
    Setting("engine.strategy", str, "threshold", "Which masked positions a denoising pass accepts.",
            choices=("threshold", "topk", "steps")),
    Setting("engine.threshold", float, 0.9, "threshold strategy: accept positions at least this confident (0-1].",
            minimum=0.0),
    Setting("engine.top_k", int, 2, "topk strategy: positions accepted per denoising pass.", minimum=1),
    Setting("engine.steps", int, 8, "steps strategy: denoising passes per block.", minimum=1),
    Setting("engine.device", str, "auto", "Where the model runs: auto, cpu, cuda, cuda:N or mps."),
    Setting("engine.dtype", str, "auto", "Weights dtype (auto: bfloat16 on GPUs, float32 on CPU).",
            choices=("auto", "float32", "bfloat16", "float16", "float64")),
    Setting("engine.quantization", str, "none", "Weights in the embedded engine: none (engine.dtype), int8, int4, "
            "fp8, or auto (the most precise that fits the memory plan). Your config or --quantization only.",
            choices=("none", "int8", "int4", "fp8", "auto")),
    Setting("engine.trust_remote_code", list, (), "Models whose own Python code may run when they load: "
            "'owner/name@COMMIT' or '/abs/path#sha256:DIGEST' (a refused model prints its line). Never from a "
            "project file."),
    Setting("engine.mask_token_id", int, -1, "Mask token id override (-1: the model's own).", minimum=-1),
    Setting("engine.compile", str, "off", "Denoise and commit passes over a static cache replayed as CUDA graphs: "
            "off, auto (on CUDA only) or static (static cache everywhere, graphs on CUDA).",
            choices=("off", "auto", "static")),
    Setting("engine.prompt_cache_tokens", int, 32768, "Prompt tokens whose caches are kept so a later prompt that "
            "extends one (the next turn of a conversation) prefills only its new tokens; the last prompt is always kept.",
            minimum=0),
    Setting("engine.max_context", int, 0, "Most positions one request may hold, prompt and reply (0: the model's "
            "context window); a longer prompt is refused with the figures, never run out of memory.", minimum=0),
    Setting("engine.max_batch_tokens", int, 0, "KV-cache positions all batched requests hold together, planned once "
            "(slots × max_context; 0: as many of serve.max_batch slots as fit in memory).", minimum=0),
    Setting("engine.memory_utilization", float, 0.9, "Share of the device's free memory (after nothing else) the "
            "memory plan may use, weights included (vLLM's gpu_memory_utilization).", minimum=0.0, maximum=1.0),
    Setting("engine.cache_dir", str, "", "Converted models (GGUF) go here (default: $XDG_CACHE_HOME/clovercode/models)."),
    # constrained tool calls on the embedded engine (docs/engine.md, Constrained decoding)
    Setting("engine.tool_choice", str, "required", "Non-interactive runs (fix, exec, eval): required (every turn ends "
            "in a valid call), auto (a call, once opened, is valid) or off.", choices=("required", "auto", "off")),
    Setting("engine.tool_prose", int, 512, "tool_choice required: tokens of prose before the model is steered into "
            "its call.", minimum=1),
)

SETTINGS_BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}
