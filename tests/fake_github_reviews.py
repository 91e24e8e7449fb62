"""The fake GitHub's pull-request conversation: pulls/get, reviews, review comments, issue comments and
replies (a mixin of tests/fake_github.py's FakeGitHub).

Like GitHub, it refuses a line comment on a line the pull request's diff does not show (422), so a
test proves clovercode only comments on changed lines. The diff is computed here from the bare
repository with git, and its hunks read by this file's own parser, not clovercode's.
"""

from __future__ import annotations

import itertools
import re
import subprocess
from typing import Any

BOT = "github-actions[bot]"
_ids = itertools.count(5000)


class ReviewsFake:
    # set by FakeGitHub: api, pulls, repos, bare_repo, violations, tokens; and _complete, _render, _sha

    def add_pull(self, full: str, head: str, base: str = "main", title: str = "A change", body: str = "",
                 head_owner: str | None = None) -> int:
        from fake_github import Pull

        pull = Pull(len(self.pulls) + 1, full, title, body, head, head_owner or full.split("/")[0], base, False)
        self.pulls.append(pull)
        self.repos[full]["issues"][pull.number] = {"title": title, "body": body, "pull_request": True}
        return pull.number

    def add_comment(self, full: str, number: int, body: str, login: str, association: str, *,
                    kind: str = "issue_comment", user_type: str = "User", path: str = "", line: int | None = None) -> int:
        """A comment someone wrote: kind issue_comment, review_comment or review. Returns its id."""
        store = self.repos[full].setdefault("comments", [])
        item = {"id": next(_ids), "kind": kind, "number": number, "body": body, "login": login,
                "association": association, "user_type": user_type, "path": path, "line": line,
                "commit": self._sha(self._pull(full, number).head) if kind != "issue_comment" and self._pull(full, number) else ""}
        store.append(item)
        return item["id"]

    def comments(self, full: str, kind: str | None = None) -> list[dict[str, Any]]:
        return [c for c in self.repos[full].get("comments", []) if kind is None or c["kind"] == kind]

    # -- helpers ------------------------------------------------------------------------------
    def _pull(self, full: str, number: int):
        return next((p for p in self.pulls if p.repo == full and p.number == number), None)

    def _login(self, request) -> str:
        return BOT  # the token a workflow gets posts as github-actions[bot]

    def _diff_lines(self, pull) -> list[tuple[str, set[int]]]:
        """(path, new-side lines of one hunk) for each hunk of base...head."""
        if self.bare_repo is None:
            return []
        proc = subprocess.run(["git", "--git-dir", str(self.bare_repo), "diff", "--no-color", "-U3",
                               f"refs/heads/{pull.base}...refs/heads/{pull.head}"], capture_output=True, text=True)
        hunks, path, lines, new = [], None, None, 0
        for row in proc.stdout.splitlines():
            if row.startswith("+++ "):
                path = row[6:] if row.startswith("+++ b/") else None
            elif (m := re.match(r"@@ -\S+ \+(\d+)(?:,\d+)? @@", row)) and path:
                lines, new = set(), int(m.group(1))
                hunks.append((path, lines))
            elif lines is not None and row[:1] in ("+", " "):
                lines.add(new)
                new += 1
        return hunks

    def _on_diff(self, pull, path: str, line: int, start: int | None) -> bool:
        return any(p == path and line in lines and (start is None or start in lines) for p, lines in self._diff_lines(pull))

    def _unresolved(self, listed: bool = True):
        """GitHub's answer to a line the diff does not show: a review lists the errors as strings, a
        single comment as error objects (each as the API description documents it)."""
        errors: list[Any] = ["Line could not be resolved"] if listed else [
            {"resource": "PullRequestReviewComment", "code": "custom", "field": "line", "message": "could not be resolved"}]
        return 422, {"message": "Validation Failed" if not listed else "Unprocessable Entity",
                     "documentation_url": "https://docs.github.com/rest", "status": "422", "errors": errors}

    def _comment_json(self, op, status: int, full: str, item: dict[str, Any]) -> Any:
        example = self.api.example(op, status)
        listed = isinstance(example, list)  # a list answer: complete one item against the list's schema
        body = example[0] if listed else example
        kind, number = item["kind"], item["number"]
        where = "pull" if kind != "issue_comment" or self._pull(full, number) else "issues"
        anchor = {"issue_comment": "issuecomment-", "review_comment": "discussion_r", "review": "pullrequestreview-"}[kind]
        body.update(id=item["id"], body=item["body"], author_association=item["association"],
                    html_url=f"https://github.com/{full}/{where}/{number}#{anchor}{item['id']}")
        body["user"] = {**(body.get("user") or {}), "login": item["login"], "type": item["user_type"]}
        if kind == "review_comment":
            body.update(path=item["path"], line=item["line"], commit_id=item["commit"] or "0" * 40,
                        diff_hunk=item.get("diff_hunk", "@@ -1 +1 @@"), in_reply_to_id=item.get("in_reply_to"))
            if item.get("in_reply_to") is None:
                body.pop("in_reply_to_id", None)
        if kind == "review":
            body.update(state="COMMENTED", commit_id=item["commit"] or "0" * 40)
        return self._complete(op, status, [body])[0] if listed else self._complete(op, status, body)

    def _new(self, full: str, number: int, kind: str, body: str, **extra: Any) -> dict[str, Any]:
        item = {"id": next(_ids), "kind": kind, "number": number, "body": body, "login": BOT, "association": "NONE",
                "user_type": "Bot", "path": "", "line": None, "commit": "", **extra}
        self.repos[full].setdefault("comments", []).append(item)
        return item

    def _find(self, full: str, kind: str, ident: int) -> dict[str, Any] | None:
        return next((c for c in self.comments(full, kind) if c["id"] == ident), None)

    # -- endpoints ------------------------------------------------------------------------------
    def _op_pulls_get(self, op, request, full, repo, segments):
        pull = self._pull(full, int(segments[4]))
        if pull is None:
            return 404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
        body = self._render(self.api.example(op, 200), pull)
        body["head"]["repo"] = {**(body["head"].get("repo") or {}), "full_name": f"{pull.head_owner}/{full.split('/')[1]}"}
        body["base"]["sha"] = self._sha(pull.base)
        return 200, self._complete(op, 200, body)

    def _op_pulls_list_reviews(self, op, request, full, repo, segments):
        items = [c for c in self.comments(full, "review") if c["number"] == int(segments[4])]
        return 200, [self._comment_json(op, 200, full, c) for c in items]

    def _op_pulls_create_review(self, op, request, full, repo, segments):
        pull = self._pull(full, int(segments[4]))
        body = request.body or {}
        for c in body.get("comments", []):
            if not self._on_diff(pull, c["path"], c.get("line", -1), c.get("start_line")):
                return self._unresolved()
        review = self._new(full, pull.number, "review", body.get("body", ""), commit=body.get("commit_id", ""))
        for c in body.get("comments", []):
            self._new(full, pull.number, "review_comment", c["body"], path=c["path"], line=c.get("line"),
                      commit=body.get("commit_id", ""), review=review["id"])
        return 200, self._comment_json(op, 200, full, review)

    def _op_pulls_update_review(self, op, request, full, repo, segments):
        review = self._find(full, "review", int(segments[6]))
        if review is None:
            return 404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
        if review["login"] != self._login(request):
            return 403, {"message": "Resource not accessible by integration", "documentation_url": "https://docs.github.com/rest"}
        review["body"] = request.body["body"]
        return 200, self._comment_json(op, 200, full, review)

    def _op_pulls_get_review(self, op, request, full, repo, segments):
        review = self._find(full, "review", int(segments[6]))
        return (404, {"message": "Not Found"}) if review is None else (200, self._comment_json(op, 200, full, review))

    def _op_pulls_list_review_comments(self, op, request, full, repo, segments):
        items = [c for c in self.comments(full, "review_comment") if c["number"] == int(segments[4])]
        return 200, [self._comment_json(op, 200, full, c) for c in items]

    def _op_pulls_create_review_comment(self, op, request, full, repo, segments):
        pull = self._pull(full, int(segments[4]))
        body = request.body
        if not self._on_diff(pull, body["path"], body.get("line", -1), body.get("start_line")):
            return self._unresolved(listed=False)
        item = self._new(full, pull.number, "review_comment", body["body"], path=body["path"], line=body.get("line"),
                         commit=body["commit_id"])
        return 201, self._comment_json(op, 201, full, item)

    def _op_pulls_get_review_comment(self, op, request, full, repo, segments):
        item = self._find(full, "review_comment", int(segments[5]))
        return (404, {"message": "Not Found"}) if item is None else (200, self._comment_json(op, 200, full, item))

    def _op_pulls_create_reply_for_review_comment(self, op, request, full, repo, segments):
        parent = self._find(full, "review_comment", int(segments[6]))
        if parent is None:
            return 404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
        item = self._new(full, parent["number"], "review_comment", request.body["body"], path=parent["path"],
                         line=parent["line"], commit=parent["commit"], in_reply_to=parent["id"])
        return 201, self._comment_json(op, 201, full, item)

    def _op_issues_get_comment(self, op, request, full, repo, segments):
        item = self._find(full, "issue_comment", int(segments[5]))
        return (404, {"message": "Not Found"}) if item is None else (200, self._comment_json(op, 200, full, item))

    def _op_issues_list_comments(self, op, request, full, repo, segments):
        items = [c for c in self.comments(full, "issue_comment") if c["number"] == int(segments[4])]
        return 200, [self._comment_json(op, 200, full, c) for c in items]

    def _op_issues_create_comment(self, op, request, full, repo, segments):
        item = self._new(full, int(segments[4]), "issue_comment", request.body["body"])
        return 201, self._comment_json(op, 201, full, item)
