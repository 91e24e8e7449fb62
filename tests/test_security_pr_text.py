"""Pull-request and commit text is inert (issue 24, point 8): what a stranger's issue, a
prompt-injected model and the project's tests write reaches GitHub only as words. No closing keyword
but clovercode's own, no live mention, no image or HTML, no fence the text can close from inside.

The attack runs end to end: a GitHub issue and a model summary written by the attacker, a test whose
failure prints the attacker's Markdown, a real `clovercode fix --pr` against the fake GitHub, and the
body GitHub received rendered with a CommonMark renderer (markdown-it, HTML on, as GitHub allows it).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser

import pytest
from conftest import cli_env, git, make_git_repo, run_cli
from conftest import tool_call_text as call
from fake_github import fake_github, github_api  # noqa: F401 - fixtures

from clovercode.trust.markdown import code_span, fence, inert_markdown, inert_text

PYTEST = f"{sys.executable} -m pytest -q"
TOKEN = "ghs_valid_token"
PAYLOAD = ("```\n</details>\n\n## Approved by @octocat\n\nCloses #13\nfixes octo/other#2\n"
           "Resolves: https://github.com/octo/quix/issues/5\n"
           "![pixel](http://evil.example/p.png)\n<img src=http://evil.example/i.png>\n"
           "&#64;admin <script>alert(1)</script>\n````\n")
# GitHub's closing keywords before an issue reference (the forms docs.github.com lists)
CLOSING = re.compile(r"(?i)\b(close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s*:?\s*((?:[\w.-]+/[\w.-]+)?#\d+|https?://\S+/issues/\d+)")
MENTION = re.compile(r"(?<![\w`])@[A-Za-z0-9][\w-]*")

FILES = {
    "gcd.py": 'def gcd(a, b):\n    if b == 0:\n        return a\n    return gcd(a % b, b)\n',
    "test_gcd.py": "from gcd import gcd\n\n\ndef test_gcd():\n    assert gcd(35, 21) == 7\n",
    # a test of the attacker's: it fails before and after, and its failure prints the payload
    "test_banner.py": ("import pytest\n\nPAYLOAD = " + repr(PAYLOAD) + "\n\n\n"
                       "@pytest.mark.parametrize('who', ['@octocat <img src=http://evil.example/t.png>'])\n"
                       "def test_banner(who):\n    print(PAYLOAD)\n    assert False, PAYLOAD\n"),
}



class Rendered(HTMLParser):
    """The rendered body: its tags, and its text outside code (where mentions and links are live)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.live_text: list[str] = []
        self.code_text: list[str] = []
        self.in_code = 0

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.in_code += tag in ("code", "pre")

    def handle_endtag(self, tag):
        self.tags.append("/" + tag)
        self.in_code -= tag in ("code", "pre")

    def handle_data(self, data):
        (self.code_text if self.in_code else self.live_text).append(data)


def render(markdown: str) -> Rendered:
    from markdown_it import MarkdownIt

    page = Rendered()
    page.feed(MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown))
    return page


@pytest.fixture
def attacked(tmp_path, fake_github):  # noqa: F811
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    source = tmp_path / "src"
    source.mkdir()
    for name, text in FILES.items():
        (source / name).write_text(text)
    work = make_git_repo(tmp_path / "quix", source)
    git(work, "remote", "add", "origin", origin.as_uri())
    git(work, "push", "-q", "origin", "main")
    fake_github.bare_repo = origin
    fake_github.add_repo("octo/quix")
    fake_github.add_issue("octo/quix", 4, "gcd() recurses forever @octocat closes #13", "gcd(35, 21) never returns.\n\n" + PAYLOAD)
    return work, fake_github


def test_attacker_text_reaches_the_pull_request_and_commit_only_as_words(attacked, tmp_path):
    work, github = attacked
    model = tmp_path / "injected.jsonl"
    turns = [call("view_file", path="gcd.py"), call("edit_file", path="gcd.py", old_text="    return gcd(a % b, b)", new_text="    return gcd(b, a % b)"),
             call("finish", summary="Swapped gcd's arguments.\n\n" + PAYLOAD)]
    model.write_text("".join(json.dumps({"text": turn}) + "\n" for turn in turns))
    env = cli_env(GITHUB_TOKEN=TOKEN, CLOVERCODE_GITHUB_API_URL=github.url)
    proc = run_cli("fix", "--repo", str(work), "--sandbox", "none", "--model", f"replay:{model}", "--json",
                   "--github-issue", "octo/quix#4", "--pr", "--test-command", PYTEST, "--test-rounds", "0", env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert "test_banner.py::test_banner[@octocat <img src=http://evil.example/t.png>]" in result["tests"]["still_failing"]
    [create] = github.calls("pulls/create")
    body, title = create.body["body"], create.body["title"]

    # no closing keyword but clovercode's own for the issue it fixes (before: #13, octo/other#2, issue 5)
    assert [m.group(0) for m in CLOSING.finditer(body)] == ["Fixes #4"]
    assert [m.group(0) for m in CLOSING.finditer(title)] == ["Fix #4"]  # the title's "closes #13" is inert
    page = render(body)
    live = "".join(page.live_text)
    # no live mention (before: @octocat in the summary, @admin through an entity)
    assert MENTION.findall(live) == []
    # no image and no HTML of the attacker's: the only tags are Markdown's and clovercode's <details>
    assert "img" not in page.tags and "script" not in page.tags
    assert page.tags.count("details") == 1 and page.tags.count("/details") == 1
    # the fence holds: the payload's heading stays text, inside the test output's code block
    assert [t for t in page.tags if t == "h2"] == ["h2"] * 3  # Summary, Changes, Tests: clovercode's own
    assert "Approved by @octocat" in "".join(page.code_text)  # shown, as code, with the test output
    assert "</details>" in "".join(page.code_text)

    # the commit message: the same rules for plain text
    message = git(work, "log", "-1", "--format=%B", result["branch"])
    assert {m.group(2) for m in CLOSING.finditer(message)} == {"#4"}  # its subject "Fix #4:" and "Fixes #4"
    assert "\n\nFixes #4\n" in message
    assert MENTION.findall(message) == []
    assert "Approved by @\u200doctocat" in message  # still readable, no longer a mention


def test_fences_cannot_be_closed_from_inside():
    for inside in ["```", "````", "a\n```\n## h", "``````````"]:
        block = fence(inside)
        bar = block.splitlines()[0]
        assert set(bar) == {"`"} and all(not line.startswith(bar) for line in block.splitlines()[1:-1])
        assert render(block + "\n\n## after").tags.count("h2") == 1
    assert fence("Closes #3").count("Closes #3") == 0


def test_an_unclosed_fence_in_untrusted_markdown_is_closed_where_it_ends():
    text = inert_markdown("Summary\n\n```python\nprint(1)\n")
    page = render(text + "\n\n## Changes")
    assert page.tags.count("h2") == 1


def test_inline_rules():
    assert inert_text("ask @octocat and @org/team, mail a@b.c") == "ask @\u200doctocat and @\u200dorg/team, mail a@b.c"
    assert not CLOSING.search(inert_text("Fixes #1, closes: #2, Resolved octo/r#3, fixed https://github.com/o/r/issues/4"))
    assert inert_text("the fix is simple; #5 is unrelated") == "the fix is simple; #5 is unrelated"
    assert code_span("a`b") == "``a`b``" and code_span("`x`") == "`` `x` ``" and code_span("a|b") == "`a\\|b`"
    assert "img" not in render(inert_markdown("<img src=x> ![a](http://t/p.png) [ok](http://t)")).tags
