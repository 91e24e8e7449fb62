"""A learnable corpus of agent turns: a request whose text determines one tool call.

Used to train the tiny block-diffusion model (scripts/train_tiny_dlm.py) and to build the held-out
prompts of ``clovercode bench engine``. Values come from real code (the Python standard library
installed with the running interpreter: file paths, directories, identifiers and source lines);
calls are rendered in the Qwen3-Coder XML format from the schemas in ``tools/``. Files are split
into train and eval sets by a hash of their path. Paths are unique to their split, but directories,
identifiers and lines recur across files, and some turns copy no value at all (`Run `git status`.`):
``held_out`` keeps only eval turns that copy a value the training split never holds, so that no
held-out turn can occur in the training data.
"""

from __future__ import annotations

import hashlib
import random
import re
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from clovercode.toolcalls.render import render_call
from clovercode.toolcalls.schemas import ToolSpec, load_tool_specs

_IDENT_RE = re.compile(r"^\s*(?:def|class)\s+([A-Za-z_][A-Za-z0-9_]{2,30})")
_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
GLOBS = ("*.py", "test_*.py", "*.txt", "*.cfg", "*.toml", "*.json", "*.md", "*.rst", "*_util*.py")
COMMANDS = ("python -m pytest -q", "git status", "git diff", "python -m unittest", "ruff check .",
            "ls -la", "python -m compileall -q .", "git log --oneline -5")


@dataclass
class Harvest:
    """Values taken from real source files."""

    paths: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    idents: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Turn:
    request: str
    name: str
    arguments: dict[str, Any]
    values: tuple[tuple[str, str], ...] = ()  # (Harvest field, value) this turn drew: what its call copies


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _split_of(rel: str) -> str:
    digest = hashlib.sha1(rel.encode("utf-8")).digest()
    return "eval" if digest[0] < 26 else "train"  # about 10 % held out


def harvest(split: str, root: Path | None = None, max_files: int | None = None) -> Harvest:
    """Collect paths, directories, identifiers and short code lines from ``split`` ("train"/"eval")."""
    root = root or stdlib_dir()
    out = Harvest()
    dirs: set[str] = set()
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and "__pycache__" not in p.parts)
    for path in files:
        rel = path.relative_to(root).as_posix()
        if _split_of(rel) != split or not rel.isascii() or " " in rel:
            continue
        if max_files is not None and len(out.paths) >= max_files:
            break
        out.paths.append(rel)
        if "/" in rel:
            dirs.add(rel.rsplit("/", 1)[0])
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for raw in text.splitlines()[:400]:
            match = _IDENT_RE.match(raw)
            if match:
                out.idents.append(match.group(1))
            line = raw.strip()
            if _usable_line(line):
                out.lines.append(line)
    out.dirs = sorted(dirs)
    out.idents = sorted(set(out.idents))
    return out


def _usable_line(line: str) -> bool:
    return (12 <= len(line) <= 56 and line.isascii() and line.isprintable() and "`" not in line
            and "<" not in line and not line.startswith(("#", '"', "'")) and _WORD_RE.search(line) is not None)


class TurnMaker:
    """Draws turns from a harvest; every turn's call is valid for the schemas in ``tools/``."""

    def __init__(self, values: Harvest, specs: list[ToolSpec] | None = None, drill: float = 0.0):
        self.values = values
        self.specs = {s.name: s for s in (specs or load_tool_specs())}
        self.makers: list[tuple[float, Callable[[random.Random], Turn]]] = [
            (3, self._view), (2, self._list), (3, self._search), (2, self._edit), (1, self._write),
            (2, self._run), (1, self._finish)]
        if drill > 0:  # training only: copies that no prior can guess teach the copy itself
            self.makers.append((drill, self._drill))

    def turn(self, rng: random.Random) -> Turn:
        weights = [w for w, _ in self.makers]
        maker = rng.choices([m for _, m in self.makers], weights)[0]
        return maker(rng)

    def call_text(self, turn: Turn) -> str:
        return render_call(turn.name, turn.arguments, self.specs.get(turn.name))

    def _view(self, rng: random.Random) -> Turn:
        path = rng.choice(self.values.paths)
        start = rng.randint(1, 400)
        end = start + rng.randint(5, 80)
        kind = rng.randrange(5)
        drawn = (("paths", path),)
        if kind == 0:
            return Turn(f"Show me {path}.", "view_file", {"path": path}, drawn)
        if kind == 1:
            return Turn(f"Open {path} so I can read it.", "view_file", {"path": path}, drawn)
        if kind == 2:
            return Turn(f"Read {path} from line {start} to line {end}.", "view_file",
                        {"path": path, "start_line": start, "end_line": end}, drawn)
        if kind == 3:
            return Turn(f"Show lines {start}-{end} of {path}.", "view_file",
                        {"path": path, "start_line": start, "end_line": end}, drawn)
        return Turn(f"Show {path} starting at line {start}.", "view_file", {"path": path, "start_line": start}, drawn)

    def _list(self, rng: random.Random) -> Turn:
        folder = rng.choice(self.values.dirs)
        glob = rng.choice(GLOBS)
        depth = rng.randint(1, 6)
        kind = rng.randrange(5)
        drawn = (("dirs", folder),)
        if kind == 0:
            return Turn(f"List the files in {folder}.", "list_files", {"path": folder}, drawn)
        if kind == 1:
            return Turn(f"What files are under {folder}?", "list_files", {"path": folder}, drawn)
        if kind == 2:
            return Turn(f"List the {glob} files in {folder}.", "list_files", {"path": folder, "pattern": glob}, drawn)
        if kind == 3:
            return Turn(f"List {folder} down to depth {depth}.", "list_files", {"path": folder, "max_depth": depth},
                        drawn)
        return Turn("List the project files.", "list_files", {})

    def _search(self, rng: random.Random) -> Turn:
        ident = rng.choice(self.values.idents)
        folder = rng.choice(self.values.dirs)
        glob = rng.choice(GLOBS[:2])
        kind = rng.randrange(4)
        drawn = (("idents", ident), ("dirs", folder))
        if kind == 0:
            return Turn(f"Where is {ident} defined?", "search_text", {"pattern": ident}, drawn[:1])
        if kind == 1:
            return Turn(f"Search {folder} for {ident}.", "search_text", {"pattern": ident, "path": folder}, drawn)
        if kind == 2:
            return Turn(f"Search the {glob} files for {ident}.", "search_text", {"pattern": ident, "glob": glob},
                        drawn[:1])
        return Turn(f"Search {folder} for {ident}, ignoring case.", "search_text",
                    {"pattern": ident, "path": folder, "case_sensitive": False}, drawn)

    def _edit(self, rng: random.Random) -> Turn:
        path = rng.choice(self.values.paths)
        line = rng.choice(self.values.lines)
        words = _WORD_RE.findall(line)
        old_word = rng.choice(words)
        new_word = rng.choice(self.values.idents)
        new_line = line.replace(old_word, new_word, 1)
        drawn = (("paths", path), ("lines", line), ("idents", new_word))
        if rng.randrange(4) == 0:
            return Turn(f"In {path}, rename every {old_word} to {new_word}.", "edit_file",
                        {"path": path, "old_text": old_word, "new_text": new_word, "replace_all": True}, drawn)
        return Turn(f"In {path}, replace `{line}` with `{new_line}`.", "edit_file",
                    {"path": path, "old_text": line, "new_text": new_line}, drawn)

    def _write(self, rng: random.Random) -> Turn:
        path = rng.choice(self.values.paths)
        line = rng.choice(self.values.lines)
        drawn = (("paths", path), ("lines", line))
        if rng.randrange(2):
            return Turn(f"Create {path} with the line `{line}`.", "write_file", {"path": path, "content": line}, drawn)
        return Turn(f"Write `{line}` to {path}.", "write_file", {"path": path, "content": line}, drawn)

    def _run(self, rng: random.Random) -> Turn:
        path = rng.choice(self.values.paths)
        command = rng.choice(COMMANDS)
        seconds = rng.choice((10, 30, 60, 120, 300, 600))
        kind = rng.randrange(4)
        if kind == 0:
            return Turn(f"Run the tests in {path}.", "run_command", {"command": f"python -m pytest -q {path}"},
                        (("paths", path),))
        if kind == 1:
            return Turn(f"Run `{command}`.", "run_command", {"command": command})
        if kind == 2:
            return Turn(f"Run `python {path}` with a timeout of {seconds} seconds.", "run_command",
                        {"command": f"python {path}", "timeout": seconds}, (("paths", path),))
        return Turn(f"Run `{command}` with a timeout of {seconds} seconds.", "run_command",
                    {"command": command, "timeout": seconds})

    def _drill(self, rng: random.Random) -> Turn:
        picked = [rng.choice(self.values.idents) for _ in range(rng.randint(2, 6))]
        folders = [rng.choice(self.values.idents) for _ in range(rng.randint(1, 3))]
        words, path = " ".join(picked), "/".join(folders) + ".py"
        return Turn(f"Write `{words}` to {path}.", "write_file", {"path": path, "content": words},
                    tuple(("idents", ident) for ident in picked + folders))

    def _finish(self, rng: random.Random) -> Turn:
        path = rng.choice(self.values.paths)
        ident = rng.choice(self.values.idents)
        summary = rng.choice((f"Fixed {ident} in {path}.", f"Renamed {ident} in {path}; the tests pass.",
                              f"Added a check to {ident} in {path}."))
        return Turn(f"We are done. Finish with the summary: {summary}", "finish", {"summary": summary},
                    (("paths", path), ("idents", ident)))


def value_sets(values: Harvest) -> dict[str, frozenset[str]]:
    """Every value of a harvest by field, for membership tests."""
    return {name: frozenset(getattr(values, name)) for name in ("paths", "dirs", "idents", "lines")}


NO_VALUE = "copies no corpus value (the same turn is drawn in training)"
ALL_SEEN = "copies only values the training split also holds"


def training_overlap(turn: Turn, train: dict[str, frozenset[str]]) -> str | None:
    """Why ``turn`` can occur in the training data, or None: it copies a value training never held.

    A training turn draws all its values from the training harvest, so a turn with one value outside
    it cannot be one (templates and constants such as commands and globs are shared by both)."""
    if not turn.values:
        return NO_VALUE
    if all(value in train[field] for field, value in turn.values):
        return ALL_SEEN
    return None


@dataclass
class HeldOut:
    """Held-out turns with their expected call text, and the eval turns left out as seen in training."""

    turns: list[tuple[Turn, str]]
    excluded: list[tuple[Turn, str]]  # (turn, why it can occur in the training data)

    @property
    def drawn(self) -> int:
        return len(self.turns) + len(self.excluded)


def held_out(count: int, seed: int, root: Path | None = None) -> HeldOut:
    """``count`` eval-split turns none of which can occur in the training data (drawn in order, the
    others set aside with the reason)."""
    maker = TurnMaker(harvest("eval", root))
    train = value_sets(harvest("train", root))
    rng = random.Random(seed)
    out = HeldOut([], [])
    while len(out.turns) < count:
        if out.drawn >= 10 * count + 100:
            raise RuntimeError(f"only {len(out.turns)} of {out.drawn} eval turns are unseen in training")
        turn = maker.turn(rng)
        reason = training_overlap(turn, train)
        if reason is None:
            out.turns.append((turn, maker.call_text(turn)))
        else:
            out.excluded.append((turn, reason))
    return out
