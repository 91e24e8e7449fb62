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
