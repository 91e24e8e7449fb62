"""Everything a REPL session showed, kept in full: /show N prints an observation the screen cut,
/transcript replays the whole session. It is one more subscriber of the loop's events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax
from rich.text import Text

from clovercode.trust.terminal import inert
from clovercode.ui.render import format_args, print_markdown


@dataclass
class Entry:
    kind: str  # user | turn | call | observation | note | end
    data: dict[str, Any]


@dataclass
class Transcript:
    entries: list[Entry] = field(default_factory=list)

    def emit(self, kind: str, **data: Any) -> None:
        if kind == "model_turn":
            self.entries.append(Entry("turn", {"content": data.get("content", ""), "reasoning": data.get("reasoning", ""),
                                               "step": data.get("step")}))
        elif kind == "tool_call":
            self.entries.append(Entry("call", {"name": data["name"], "arguments": data.get("arguments", {})}))
        elif kind == "observation":
            self.entries.append(Entry("observation", {"name": data["name"], "ok": data["ok"], "text": data["text"],
                                                      "diff": (data.get("data") or {}).get("diff")}))
        elif kind in ("warning", "format_error"):
            self.entries.append(Entry("note", {"text": data.get("text") or ""}))
        elif kind == "run_end":
            self.entries.append(Entry("end", {"detail": data.get("detail", ""), "summary": data.get("summary"),
                                              "stop_reason": data.get("stop_reason")}))

    def add_user(self, text: str, kind: str = "user") -> None:
        self.entries.append(Entry(kind, {"text": text}))

    def observations(self) -> list[Entry]:
        return [e for e in self.entries if e.kind == "observation"]

    def observation_count(self) -> int:
        return len(self.observations())

    def clear(self) -> None:
        self.entries.clear()


def print_observation(console: Console, number: int, entry: Entry) -> None:
    data = entry.data
    mark = "[green]✓[/]" if data["ok"] else "[red]✗[/]"
    console.print(f"[bold]#{number}[/] {mark} [cyan]{escape(inert(data['name'], newlines=False))}[/]", highlight=False)
    console.print(Text(inert(data["text"])), soft_wrap=True)


def show_command(console: Console, transcript: Transcript, arg: str) -> None:
    """/show [N]: observation N in full (default: the last one)."""
    observations = transcript.observations()
    if not observations:
        console.print("nothing to show yet: no tool has run in this session", highlight=False)
        return
    if not arg:
        number = len(observations)
    elif arg.isdigit() and 1 <= int(arg) <= len(observations):
        number = int(arg)
    else:
        console.print(f"/show takes an observation number from 1 to {len(observations)}", highlight=False)
        return
    print_observation(console, number, observations[number - 1])


def transcript_command(console: Console, transcript: Transcript) -> None:
    """/transcript: the whole session, nothing cut."""
    if not transcript.entries:
        console.print("the transcript is empty", highlight=False)
        return
    number = 0
    for entry in transcript.entries:
        data = entry.data
        if entry.kind in ("user", "shell"):
            prefix = "!" if entry.kind == "shell" else "›"
            console.print(Text(f"{prefix} {inert(data['text'])}", style="bold"), soft_wrap=True)
        elif entry.kind == "turn":
            if data["reasoning"].strip():
                console.print(Text(inert(data["reasoning"].strip()), style="dim italic"), soft_wrap=True)
            if data["content"].strip():
                print_markdown(console, data["content"].strip())
        elif entry.kind == "call":
            console.print(f"[bold cyan]→ {escape(inert(data['name'], newlines=False))}[/] "
                          f"{escape(format_args(data['arguments']))}", highlight=False)
        elif entry.kind == "observation":
            number += 1
            if data.get("diff"):
                console.print(f"[bold]#{number}[/] [green]✓[/] {escape(inert(data['text'].splitlines()[0]))}",
                              highlight=False)
                console.print(Syntax(inert(data["diff"]), "diff", theme="ansi_dark", background_color="default"))
            else:
                print_observation(console, number, entry)
        elif entry.kind == "note":
            console.print(f"[yellow]⚠ {escape(inert(data['text']))}[/]", highlight=False)
        elif entry.kind == "end":
            console.print(f"[dim]■ {escape(inert(data['detail']))}[/]", highlight=False)
            if data.get("stop_reason") == "finished" and data.get("summary"):
                print_markdown(console, data["summary"])
