"""The one place consoles are made: no automatic highlighting (it recolours file contents and
numbers in tool output), styling dropped by rich itself for NO_COLOR and non-terminals.

Every segment of text such a console writes passes :func:`clovercode.trust.terminal.inert`: the
callers make untrusted strings inert where they are laid out (so widths come out right), and this is
the net under them, for text from outside that reaches the screen through some other path (a
Markdown answer, an error message quoting a file). rich's own control segments (the live region's
cursor moves) are not text and pass. Where the output's encoding lacks a character (a Latin-1
locale) the text is fitted to it (ui/glyphs.py) instead of failing mid-line."""

from __future__ import annotations

from typing import Iterable, Mapping

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment

from clovercode.trust.terminal import inert
from clovercode.ui.glyphs import fit, is_unicode
from clovercode.ui.theme import choose_theme, remap


class InertConsole(Console):
    theme_name = "dark"  # ui/theme.py: "light" remaps the colours for a light background
    theme_reason = "the default"  # why: ui.theme, COLORFGBG, the terminal's background (/status says)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        unicode = is_unicode(self.encoding)  # else marks fall back to ASCII, other characters to "?"
        for segment in super().render(renderable, options):
            if segment.control or not segment.text:
                yield segment
                continue
            text = inert(segment.text) if unicode else fit(inert(segment.text), self.encoding)
            style = remap(segment.style, self.theme_name) if segment.style is not None else None
            yield segment if text is segment.text and style is segment.style else Segment(text, style)


def use_theme(console: Console, setting: str, env: Mapping[str, str], ask_terminal: bool = False) -> None:
    """Set ``console``'s theme from ``ui.theme`` (auto: the terminal's COLORFGBG, else, with
    ``ask_terminal`` where stdin and the console are the terminal, its answer about its background)."""
    if not isinstance(console, InertConsole):
        return
    ask = None
    if ask_terminal and console.is_terminal and not console.is_dumb_terminal:
        def ask() -> bool | None:
            import sys

            from clovercode.ui.termquery import is_light, query_background

            try:
                rgb = query_background(sys.stdin.fileno(), console.file.fileno())
            except (AttributeError, ValueError, OSError):  # a stream without a descriptor
                return None
            return None if rgb is None else is_light(rgb)
    console.theme_name, console.theme_reason = choose_theme(setting, env, ask)


def make_console(*, stderr: bool = False) -> Console:
    import sys

    stream = sys.stderr if stderr else sys.stdout
    log = stderr and not (hasattr(stream, "isatty") and stream.isatty())  # a log: lines as written, not cut at 80
    return InertConsole(stderr=stderr, highlight=False, soft_wrap=log)
