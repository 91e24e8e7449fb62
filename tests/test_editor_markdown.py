"""Issue 49.4: the model's Markdown reaches an editor inert (trust/markdown.py, EditorMarkdown): an
image becomes a link (nothing fetched when the editor renders it), raw HTML shows as text, code passes
as it is; and where the stream was cut into chunks never changes the result."""

from __future__ import annotations

import random
import re

import pytest

from clovercode.trust.markdown import EditorMarkdown


# What the renderer itself writes for Markdown: the text's own HTML would add others (img, b, script...).
RENDERED_TAGS = {t for name in ("p", "code", "pre", "em", "strong", "a", "br", "hr", "blockquote", "ul", "ol", "li",
                                "h1", "h2", "h3", "h4", "h5", "h6") for t in (name, "/" + name)}


def _renderer():  # noqa: ANN202
    from markdown_it import MarkdownIt  # rich's Markdown parser: installed with the core

    return MarkdownIt("commonmark")


RENDERER = _renderer()


def whole(text: str) -> str:
    inert = EditorMarkdown()
    return inert.feed(text) + inert.flush()


def chunked(text: str, rng: random.Random) -> str:
    inert, out, at = EditorMarkdown(), [], 0
    while at < len(text):
        size = rng.randint(1, 9)
        out.append(inert.feed(text[at:at + size]))
        at += size
    return "".join(out) + inert.flush()


@pytest.mark.parametrize("text, shown", [
    ("see ![pixel](https://t.example/p.png)", "see !\\[pixel](https://t.example/p.png)"),
    ("<img src=x onerror=alert(1)>", "&lt;img src=x onerror=alert(1)>"),
    ("`Vec<T>` and ``a`b<c``", "`Vec<T>` and ``a`b<c``"),  # code spans render literally: kept
    ("```html\n<b>![a](b)</b>\n```\n<i>", "```html\n<b>![a](b)</b>\n```\n&lt;i>"),  # a fence, then prose
    ("~~~\n<x>\n~~~~\n<y>", "~~~\n<x>\n~~~~\n&lt;y>"),
    ("\\` <img onerror=1> `", "\\` &lt;img onerror=1> `"),  # an escaped backtick opens no span
    ("a ` lone <b>\n\nnext", "a ` lone &lt;b>\n\nnext"),  # a span never crosses a paragraph
    ("```\n<never closed>", "```\n<never closed>"),
])
def test_images_and_html_are_inert_and_code_is_kept(text: str, shown: str) -> None:
    assert whole(text) == shown


def test_where_the_stream_is_cut_changes_nothing() -> None:
    rng = random.Random(49)
    alphabet = "ab `~!<>[]\\\n()/"
    for _ in range(1500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        expected = whole(text)
        assert chunked(text, rng) == expected, text
        # outside code nothing opens a tag or an image
        # rendered by a CommonMark renderer (HTML allowed, as an editor's may): no image, no tag of the text's own
        tags = set(re.findall(r"<(/?[A-Za-z][A-Za-z0-9]*)", RENDERER.render(expected)))
        assert tags <= RENDERED_TAGS, (text, tags - RENDERED_TAGS)
