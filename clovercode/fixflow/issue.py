"""The issue to fix, from text, a file, or GitHub; and the task text the model gets for it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clovercode.ground.errors import UsageError
from clovercode.github.refs import IssueRef
from clovercode.ground.taskinput import check_task


@dataclass(frozen=True)
class Issue:
    title: str
    body: str
    ref: IssueRef | None = None  # set for GitHub issues
    url: str = ""

    @property
    def number(self) -> int | None:
        return self.ref.number if self.ref else None

    def task(self, test_command: str | None) -> str:
        """What the model is asked to do."""
        head = f"Fix GitHub issue #{self.number}: {self.title}" if self.ref else self.title
        parts = [head]
        if self.body.strip():
            parts.append(self.body.strip())
        if test_command:
            parts.append(f"The project's tests run with `{test_command}`; they are run again after you call finish, "
                         "and failures come back to you.")
        return "\n\n".join(parts)


def issue_from_text(text: str, what: str = "the issue text") -> Issue:
    """First non-empty line is the title (a leading Markdown '#' dropped), the rest the body."""
    lines = check_task(text, what).strip().splitlines()
    title = lines[0].strip().lstrip("#").strip() or "issue"
    return Issue(title, "\n".join(lines[1:]).strip())


def issue_from_file(path: Path) -> Issue:
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"issue file not found: {path}") from None
    except UnicodeDecodeError:
        raise UsageError(f"issue file {path} is not UTF-8 text") from None
    except OSError as exc:
        raise UsageError(f"issue file {path} cannot be read: {exc.strerror or exc}") from None
    return issue_from_text(text, f"the issue file {path}")


def choose_source(text: str | None, file: Path | None, github: str | None) -> str:
    """Exactly one of the three inputs must be given; returns which ('text' | 'file' | 'github')."""
    given = [name for name, value in (("text", text), ("file", file), ("github", github)) if value]
    if len(given) != 1:
        raise UsageError("give the issue exactly one way: as text, with --issue-file PATH, or with --github-issue OWNER/REPO#N"
                         + (f" (got {', '.join(given)})" if given else ""))
    return given[0]
