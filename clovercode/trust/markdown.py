"""Untrusted text made inert for a pull-request body (GitHub Markdown) or a commit message.

Whatever the model wrote (its summary), the tests printed (their output, their ids) or a stranger
filed (an issue's title and body) reaches GitHub through clovercode's pull request and commit. There
it must mean nothing but its words:

- **no closing keyword**: ``Closes #3``, ``fixes org/repo#9``, ``Resolved: https://github.com/o/r/issues/2``
  close that issue when the pull request is merged; the keyword gets a zero-width joiner inside it
  (``Clo\u200dses``), so it reads the same and GitHub no longer sees the keyword. clovercode adds its own
  ``Fixes #N`` for the issue it fixes after this is applied;
- **no live mention**: ``@user`` and ``@org/team`` notify people; a zero-width joiner after the ``@``
  keeps the text and drops the mention;
- **no image, no HTML** (pull-request bodies): ``![](https://tracker/pixel.png)`` and ``<img src=…>``
  load a URL whenever someone views the pull request (a tracking pixel), raw HTML can hide text or
  fake clovercode's own sections; ``<`` is written as ``&lt;`` and ``![`` as ``!\\[`` outside code;
- **fences that hold**: text put in a code block is fenced with more backticks than any run inside
  it, so a line of ````` in test output cannot close the block and turn the rest into Markdown; a
  fence the untrusted text opens and never closes is closed where the text ends.

Ground floor: standard library only. docs/security.md ("Trust: pull-request and commit text").
"""

from __future__ import annotations

import re

ZWJ = "\u200d"  # zero-width joiner: invisible, and it splits a word for GitHub's parsers

# GitHub's closing keywords, followed (after an optional colon) by an issue reference or URL
CLOSING = re.compile(
    r"\b(?P<word>close[sd]?|fix(?:e[sd])?|resolve[sd]?)(?P<rest>\s*:?\s*(?:[\w.-]+/[\w.-]+)?#\d"
    r"|\s*:?\s*https?://|\s*:?\s*GH-\d)", re.IGNORECASE)
MENTION = re.compile(r"(?<![\w`@])@(?=[A-Za-z0-9_-])")
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
BACKTICKS = re.compile(r"`+")


def no_closing_keywords(text: str) -> str:
    """``Closes #3`` → ``Clo\u200dses #3``: the same to a reader, no keyword to GitHub."""
    return CLOSING.sub(lambda m: m.group("word")[0] + ZWJ + m.group("word")[1:] + m.group("rest"), text)


def no_mentions(text: str) -> str:
    """``@octocat`` → ``@\u200doctocat``: no notification, no link."""
    return MENTION.sub("@" + ZWJ, text)


def inert_text(text: str) -> str:
    """Plain text (a commit message's lines): no closing keyword, no mention."""
    return no_mentions(no_closing_keywords(text))


def fence(text: str, info: str = "") -> str:
    """``text`` as a fenced code block that nothing inside it can close (nor any keyword in it close an issue)."""
    return code_fence(no_closing_keywords(text), info)


def code_fence(text: str, info: str = "") -> str:
    """``text`` as a fenced code block that nothing inside it can close (an editor's Markdown, no GitHub)."""
    longest = max((len(run) for run in BACKTICKS.findall(text)), default=0)
    bar = "`" * max(3, longest + 1)
    return f"{bar}{info}\n{text.rstrip(chr(10))}\n{bar}"


def code_span(text: str) -> str:
    """``text`` as one inline code span on one line (a table cell's path, a test id)."""
    flat = " ".join(text.splitlines()).replace("|", "\\|")
    longest = max((len(run) for run in BACKTICKS.findall(flat)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{ticks}{pad}{no_closing_keywords(flat)}{pad}{ticks}"


def inert_markdown(text: str) -> str:
    """Markdown from an untrusted author, to embed in a pull-request body: its code blocks and code
    spans stay as they are (a fence left open is closed), and outside them no closing keyword, no
    mention, no image and no HTML."""
    out: list[str] = []
    prose: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            prose.append(lines[i])
            i += 1
            continue
        if prose:
            out.append(_inert_prose("\n".join(prose)))
        prose = []
        char, size = opened.group("fence")[0], len(opened.group("fence"))
        closer = re.compile(rf"^ {{0,3}}{re.escape(char)}{{{size},}}\s*$")
        block = [lines[i]]
        i += 1
        while i < len(lines) and not closer.match(lines[i]):
            block.append(lines[i])
            i += 1
        if i < len(lines):
            block.append(lines[i])
            i += 1
        else:  # never closed: it would swallow everything after it
            block.append(opened.group("indent") + opened.group("fence"))
        out.append(no_closing_keywords("\n".join(block)))
    if prose:
        out.append(_inert_prose("\n".join(prose)))
    return "\n".join(out)


def _inert_prose(text: str) -> str:
    """Outside fences: code spans kept (they render literally), the rest made inert."""
    parts: list[str] = []
    pos = 0
    while pos < len(text):
        run = BACKTICKS.search(text, pos)
        if run is None:
            parts.append(_inert_words(text[pos:]))
            break
        close = re.compile(rf"(?<!`){run.group(0)}(?!`)").search(text, run.end())
        if close is None:  # a lone backtick run is literal text
            parts.append(_inert_words(text[pos:run.end()]))
            pos = run.end()
            continue
        parts.append(_inert_words(text[pos:run.start()]))
        parts.append(no_closing_keywords(text[run.start():close.end()]))
        pos = close.end()
    return "".join(parts)


def _inert_words(text: str) -> str:
    # & first: an entity (&#64; is @) would otherwise render as the character it names
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace("![", "!\\[")
    return no_mentions(no_closing_keywords(text))


SPAN_HOLD = 2000  # an open code span is held this long waiting for its closer, then taken as text


class EditorMarkdown:
    """The model's Markdown streamed to an editor, inert: an image becomes a plain link (``!\\[``), so
    nothing is fetched when the editor renders it, and raw HTML shows as text (``&lt;``); fenced code
    and code spans pass unchanged. The result does not depend on where the chunks were cut: what
    cannot be decided yet (a line that may open a fence, a ``!`` or backtick run at the end, a code
    span whose closer has not come) is held until it can, and ``flush`` decides the rest."""

    def __init__(self) -> None:
        self.pending = ""
        self.fence: tuple[str, int] | None = None  # inside a fenced block: its character and length
        self.line = ""  # the current line so far (a fence's closer is judged at its newline)
        self.opener = False  # the current line opened the fence

    def feed(self, text: str) -> str:
        return self._run(self.pending + text, final=False)

    def flush(self) -> str:
        return self._run(self.pending, final=True)

    def _run(self, text: str, final: bool) -> str:
        out: list[str] = []
        i = 0
        while i < len(text):
            step = self._step(text, i, final, out)
            if step is None:  # needs more text to decide
                break
            i = step
        self.pending = text[i:]
        return "".join(out)

    def _step(self, text: str, i: int, final: bool, out: list[str]) -> int | None:
        char = text[i]
        if self.fence is not None:  # fenced code: verbatim, and each line judged as a closer at its end
            end = text.find("\n", i)
            if end < 0:
                self.line += text[i:]
                out.append(text[i:])
                return len(text)
            self.line += text[i:end]
            out.append(text[i:end + 1])
            fence_char, size = self.fence
            if not self.opener and re.fullmatch(rf" {{0,3}}{re.escape(fence_char)}{{{size},}}\s*", self.line):
                self.fence = None
            self.line, self.opener = "", False
            return end + 1
        if not self.line and char != "\n":  # the start of a prose line: does it open a fence?
            head = re.match(r" {0,3}(`{3,}|~{3,})", text[i:])
            if head is None and not final and re.fullmatch(r" {0,3}(`{0,2}|~{0,2})", text[i:i + 6]):
                return None  # too little of the line yet
            if head is not None and (i + head.end() < len(text) or final):
                self.fence, self.opener = (head.group(1)[0], len(head.group(1))), True
                return i  # the line goes out verbatim through the branch above
            if head is not None:
                return None  # the fence may go on in the next chunk
        if char == "\n":
            self.line = ""
            out.append(char)
            return i + 1
        self.line += char
        if char == "\\" and i + 1 < len(text):  # an escape: both characters as they are
            out.append(text[i:i + 2])
            self.line += text[i + 1]
            return i + 2
        if char == "\\" and not final:
            self.line = self.line[:-1]
            return None
        if char == "!":
            if i + 1 >= len(text) and not final:
                self.line = self.line[:-1]
                return None
            out.append("!\\" if text[i + 1:i + 2] == "[" else "!")
            return i + 1
        if char == "<":
            out.append("&lt;")
            return i + 1
        if char == "`":
            return self._span(text, i, final, out)
        out.append(char)
        return i + 1

    def _span(self, text: str, i: int, final: bool, out: list[str]) -> int | None:
        run = BACKTICKS.match(text, i).group(0)
        end = i + len(run)
        if end >= len(text) and not final:
            self.line = self.line[:-1]
            return None
        close = re.compile(rf"(?<!`){run}(?!`)").search(text, end)
        blank = text.find("\n\n", end)  # a code span never crosses a paragraph
        if close is not None and (blank < 0 or close.start() < blank):
            if close.end() >= len(text) and not final:  # the closing run may go on
                self.line = self.line[:-1]
                return None
            out.append(text[i:close.end()])
            self.line += text[i + 1:close.end()]
            self.line = self.line.rsplit("\n", 1)[-1]
            return close.end()
        if blank < 0 and not final and len(text) - i < SPAN_HOLD:
            self.line = self.line[:-1]
            return None  # its closer may still come
        out.append(run)  # a lone run: literal backticks, and what follows is prose
        self.line += run[1:]
        return end
