"""Bodies of the context commands: ``clovercode map``, ``--resume``, and the REPL's /compact and /context.
cli.py and repl.py only register them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console

from clovercode.ground.errors import CloverError, UsageError
from clovercode.trust import gitsafe

DEFAULT_MAP_TOKENS = 2048  # for `clovercode map` when the prompt's map is switched off
RESUME_LATEST = "@latest"


def print_map(root: Path, cfg: Any, tokens: int | None, focus: Sequence[str], stats: bool,
              out: Console, err: Console) -> None:
    from clovercode.context.grammars import require_map_modules
    from clovercode.context.index import build_index
    from clovercode.context.repomap import index_options, make_repo_map, resolve_focus

    if tokens is not None and tokens < 1:
        raise UsageError(f"--tokens must be at least 1, got {tokens}")
    require_map_modules()
    budget = tokens or cfg["context.map_tokens"] or DEFAULT_MAP_TOKENS
    index = build_index(root, index_options(cfg))
    items = [part.strip() for item in focus for part in item.split(",") if part.strip()]
    files, idents = resolve_focus(index, items, Path.cwd())
    repo_map = make_repo_map(index, budget, focus_files=files, focus_idents=idents)
    if not repo_map.text:
        err.print(_empty_reason(root, index.stats.files), highlight=False, markup=False, soft_wrap=True)
    out.print(repo_map.text, end="", highlight=False, markup=False, soft_wrap=True)
    if stats:
        err.print(repo_map.summary() + " (tokens estimated)", highlight=False, markup=False, soft_wrap=True)


def _empty_reason(root: Path, files: int) -> str:
    if files:
        return f"no definitions found in the {files} source files under {root}"
    from clovercode.context.grammars import EXTENSIONS

    kinds = " ".join(sorted(set(EXTENSIONS)))
    inside_git = gitsafe.run(root, "rev-parse", "--is-inside-work-tree",
                             capture_output=True, text=True).stdout.strip() == "true"
    why = (" git lists none here: untracked files that .gitignore ignores are left out" if inside_git else "")
    return f"no source files under {root} that the map reads ({kinds});{why}".rstrip(";")


def resume_argv(argv: Sequence[str]) -> list[str]:
    """Let ``--resume`` go without its ID (the newest session): typer options cannot take an
    optional value, so a bare ``--resume`` becomes ``--resume=@latest`` before parsing."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--":
            break
        if arg == "--resume" and (i + 1 == len(out) or out[i + 1].startswith("-")):
            out[i] = f"--resume={RESUME_LATEST}"
        elif arg == "--resume=":
            out[i] = f"--resume={RESUME_LATEST}"
    return out


def resumed_session_id(cfg: Any, root: Path, ident: str) -> str | None:
    """The id of the session ``--resume ID`` / ``--last`` continues, or None where there is none
    (``resume_into`` then says why)."""
    from clovercode.context.resume import find_saved, load_saved
    from clovercode.wiring.session import trajectory_dir
    from clovercode.wiring.sessions import newest_of_session

    directory = trajectory_dir(cfg, os.environ)
    try:
        saved = newest_of_session(directory, load_saved(find_saved(directory, None if ident == RESUME_LATEST else ident,
                                                                   root)))
    except CloverError:
        return None
    return saved.session_id if saved.root in (None, "", str(root)) else None


def resume_into(session: Any, ident: str, console: Console, *, any_project: bool = False, pick: Any = None) -> None:
    """Load a saved session's conversation into ``session`` and show its last exchanges. Without an
    ID, ``pick`` (a terminal's picker) chooses among this project's sessions, else the newest is taken.
    Another project's session is refused unless ``any_project``."""
    from clovercode.context.resume import find_saved, load_saved
    from clovercode.wiring.session import trajectory_dir
    from clovercode.wiring.sessions import check_project, list_sessions, newest_of_session, show_last_exchanges

    directory = trajectory_dir(session.cfg, session.env)
    if ident == RESUME_LATEST and pick is not None:
        sessions = list_sessions(directory, session.root)
        if not sessions:
            find_saved(directory, None, session.root)  # raises the usual "no saved session for …"
        chosen = pick(sessions)
        if chosen is None:
            console.print("not resuming: a new session starts", highlight=False)
            return
        saved = chosen.saved
    else:
        saved = newest_of_session(directory, load_saved(find_saved(directory, None if ident == RESUME_LATEST else ident,
                                                                   session.root)))
        check_project(saved, session.root, any_project)
    if not saved.messages:
        raise UsageError(f"saved session {saved.id} holds no conversation to continue")
    if saved.root and saved.root != str(session.root):
        console.print(f"[yellow]note[/]: session {saved.session_id} was saved in {saved.root}; continuing in {session.root}",
                      highlight=False, soft_wrap=True)
    session.conversation.messages[:] = saved.messages
    session.session_id = saved.session_id
    console.print(f"resumed {saved.session_id}: {len(saved.messages)} message{'' if len(saved.messages) == 1 else 's'}; last task: {saved.goal or '(none)'}",
                  highlight=False, markup=False, soft_wrap=True)
    show_last_exchanges(console, saved.messages)


def context_line(session: Any) -> str | None:
    prompt = getattr(session, "prompt", None)
    if prompt is None or prompt.last is None:
        return None
    return prompt.last.line()


def ensure_prompt(session: Any) -> Any:
    """The session's prompt builder, made now (without a task) when no task has run yet. Between
    tasks it reports to no sink: the last task's trajectory is closed."""
    if session.prompt is not None:
        session.prompt.sink = None
    else:
        from clovercode.context.assemble import ContextAssembler
        from clovercode.toolcalls.schemas import load_tool_specs

        specs = load_tool_specs()
        session.prompt = ContextAssembler(session.root, session.cfg, session.env, session.interactive).prompt_for(
            session.conversation, "", specs, session.backend, session.cfg["max_new_tokens"])
    return session.prompt


def compact_command(repl: Any, _: str) -> bool:
    session = repl.session
    if not session.conversation.messages:
        repl.console.print("nothing to compact: the conversation is empty", highlight=False)
        return True
    prompt = ensure_prompt(session)
    before, after = prompt.compact_now(session.conversation)
    if after >= before:
        repl.console.print("nothing to compact: the history is already as short as compaction makes it",
                           highlight=False)
    else:
        repl.console.print(f"compacted the history: {before} → {after} tokens", highlight=False)
    line = context_line(session)
    if line:
        repl.console.print(line, style="dim", highlight=False, markup=False, soft_wrap=True)
    return True


def context_command(repl: Any, _: str) -> bool:
    session = repl.session
    prompt = ensure_prompt(session)
    prompt.build(session.conversation)
    repl.console.print(context_line(session) or "context: empty", highlight=False, markup=False, soft_wrap=True)
    return True

