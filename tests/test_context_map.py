"""The repository map on real git repositories: golden output, ranking, file selection, the tag cache."""

import os
import sqlite3
from pathlib import Path

import pytest
from conftest import git, make_git_repo
from golden_map import GOLDEN, render_sample_map, sample_git_repo

from clovercode.context.cache import cache_file, graph_file
from clovercode.context.index import IndexOptions, build_index, parse_batch, parse_files, parse_in_worker
from clovercode.context.mentions import find_mentions
from clovercode.context.rank import rank_definitions
from clovercode.context.render import fit_outline, render_outline
from clovercode.context.repomap import make_repo_map, map_for_texts, resolve_focus
from clovercode.context.selection import select_files
from clovercode.context.tokens import estimate_tokens
from clovercode.ground.errors import UsageError


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_golden_map_of_the_sample_project(tmp_path):
    # After an intended change: scripts/regen_golden_map.py, then review the diff.
    assert render_sample_map(tmp_path) == GOLDEN.read_text(encoding="utf-8")


def test_sample_map_reads_every_language(tmp_path):
    root = sample_git_repo(tmp_path / "sample")
    index = build_index(root, IndexOptions(cache_dir=None))
    languages = {tags.language for tags in index.files.values()}
    assert languages == {"python", "typescript", "tsx", "javascript", "c", "cpp", "go", "rust", "java"}
    text = make_repo_map(index, 10_000).text
    for needle in ("class UserStore:", "export interface ApiUser", "func NewServer(addr string) *Server",
                   "pub fn checksum(data: &[u8]) -> u64", "public class Worker implements Runnable",
                   "uint32_t hash_bytes(const unsigned char *data, size_t len)"):
        assert needle in text


def hub_repo(root: Path) -> Path:
    """`hub.py` is used by every client; `focus.py` alone uses `left.py` and `right.py`."""
    write(root, "pkg/hub.py", "def hub_service():\n    return 1\n\n\ndef hub_helper():\n    return 2\n")
    for i in range(8):
        write(root, f"pkg/client{i}.py", f"from pkg.hub import hub_service, hub_helper\n\n\ndef client_{i}():\n"
                                         "    return hub_service() + hub_helper()\n")
    write(root, "pkg/left.py", "def left_parse(text):\n    return text.split()\n")
    write(root, "pkg/right.py", "class RightWriter:\n    def write_out(self, words):\n        return words\n")
    write(root, "pkg/focus.py", "from pkg.left import left_parse\nfrom pkg.right import RightWriter\n\n\n"
                                "def run_focus(text):\n    return RightWriter().write_out(left_parse(text))\n")
    write(root, "pkg/zz_caller.py", "from pkg.focus import run_focus\n\n\ndef call_focus():\n    return run_focus('a b')\n")
    return make_git_repo(root)


def file_order(ranked) -> list[str]:
    seen: list[str] = []
    for item in ranked:
        if item.rel not in seen:
            seen.append(item.rel)
    return seen


def test_focused_files_neighbours_come_first(tmp_path):
    index = build_index(hub_repo(tmp_path / "repo"), IndexOptions(cache_dir=None))
    unfocused = file_order(rank_definitions(index.files))
    assert unfocused[0] == "pkg/hub.py"  # what everything uses wins without a focus
    focused = file_order(rank_definitions(index.files, focus_files=["pkg/focus.py"]))
    neighbours = {"pkg/left.py", "pkg/right.py", "pkg/focus.py", "pkg/zz_caller.py"}
    assert set(focused[:4]) == neighbours, focused
    assert focused.index("pkg/hub.py") > 3
    # a focused symbol pulls its definition to the top the same way
    by_symbol = rank_definitions(index.files, focus_idents=["left_parse"])
    assert by_symbol[0].definition.name == "left_parse"


def test_task_text_focuses_the_map(tmp_path):
    index = build_index(hub_repo(tmp_path / "repo"), IndexOptions(cache_dir=None))
    repo_map = map_for_texts(index, 60, ["The words come out wrong in focus.py; see RightWriter"])
    assert repo_map.focus_files == ["pkg/focus.py"] and repo_map.focus_idents == ["RightWriter"]
    assert "class RightWriter:" in repo_map.text
    assert "hub_service" not in repo_map.text


def test_mentions_match_paths_suffixes_and_defined_names():
    paths = ["src/app/main.py", "src/app/util.py", "lib/util.py", "docs/guide.md"]
    found = find_mentions(["fix src/app/main.py and app/util.py, call parse_args()", "./lib/util.py."],
                          paths, {"parse_args", "main"})
    assert found.files == {"src/app/main.py", "src/app/util.py", "lib/util.py"}
    assert found.idents == {"parse_args", "main"}
    assert find_mentions(["util.py"], paths, set()).files == {"src/app/util.py", "lib/util.py"}


def test_gitignore_is_respected_and_untracked_files_are_read(tmp_path):
    root = make_git_repo(tmp_path / "repo")
    write(root, ".gitignore", "build_out/\nsecret_*.py\n")
    write(root, "tracked.py", "def tracked_function():\n    pass\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "tracked")
    write(root, "untracked.py", "def untracked_function():\n    pass\n")
    write(root, "secret_keys.py", "def ignored_function():\n    pass\n")
    write(root, "build_out/gen.py", "def ignored_build():\n    pass\n")
    text = make_repo_map(build_index(root, IndexOptions(cache_dir=None)), 1000).text
    assert "tracked_function" in text and "untracked_function" in text
    assert "ignored_function" not in text and "ignored_build" not in text


def test_vendored_generated_binary_and_huge_files_are_skipped(tmp_path):
    root = tmp_path / "repo"
    write(root, "src/app.py", "def real_code():\n    pass\n")
    write(root, "vendor/lib.py", "def vendored_code():\n    pass\n")
    write(root, "web/node_modules/x/index.js", "function nodeModule() {}\n")
    write(root, "web/app.min.js", "function minified() {}\n")
    write(root, "api/service_pb2.py", "def generated_stub():\n    pass\n")
    write(root, "gen/models.go", "// Code generated by sqlc. DO NOT EDIT.\npackage gen\nfunc GeneratedModel() {}\n")
    (root / "blob.py").write_bytes(b"def binary_blob():\n\x00\x00\x00")
    write(root, "big.py", "def huge_file():\n    pass\n" + "# padding\n" * 20000)
    make_git_repo(root)
    selection = select_files(root, max_bytes=100_000)
    assert sorted(f.rel for f in selection.files) == ["blob.py", "gen/models.go", "src/app.py"]
    assert selection.too_large == ["big.py"]
    index = build_index(root, IndexOptions(cache_dir=None, max_bytes=100_000))
    assert index.stats.skipped == {"binary": 1, "generated": 1, "too large": 1}
    assert [d.name for tags in index.files.values() for d in tags.defs] == ["real_code"]


def test_outside_git_the_walk_skips_vendored_trees(tmp_path):
    root = tmp_path / "plain"
    write(root, "main.go", "package main\nfunc Main() {}\n")
    write(root, "site-packages/dep.py", "def dependency():\n    pass\n")
    assert [f.rel for f in select_files(root, 10**6).files] == ["main.go"]


def cache_rows(cache_dir: Path, root: Path) -> dict:
    with sqlite3.connect(cache_file(cache_dir, root.resolve())) as db:
        return {path: (mtime, size) for path, mtime, size in db.execute("SELECT path, mtime_ns, size FROM tags")}


def test_second_run_reads_the_cache_and_an_edit_invalidates_one_file(tmp_path):
    root = hub_repo(tmp_path / "repo")
    options = IndexOptions(cache_dir=tmp_path / "cache")
    first = build_index(root, options)
    assert (first.stats.parsed, first.stats.cached) == (13, 0)
    second = build_index(root, options)
    assert (second.stats.parsed, second.stats.cached) == (0, 13)
    assert second.files == first.files

    write(root, "pkg/left.py", "def left_parse(text):\n    return text.split()\n\n\ndef left_extra():\n    pass\n")
    third = build_index(root, options)
    assert (third.stats.parsed, third.stats.cached) == (1, 12)
    assert "left_extra" in [d.name for d in third.files["pkg/left.py"].defs]

    # same size, new mtime: still re-parsed (renamed function, identical length)
    path = root / "pkg" / "right.py"
    path.write_text(path.read_text().replace("write_out", "write_ok_"))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    fourth = build_index(root, options)
    assert fourth.stats.parsed == 1
    assert "write_ok_" in [d.name for d in fourth.files["pkg/right.py"].defs]

    (root / "pkg" / "zz_caller.py").unlink()
    build_index(root, options)
    assert "pkg/zz_caller.py" not in cache_rows(tmp_path / "cache", root)


def test_corrupt_cache_is_rebuilt_not_fatal(tmp_path):
    root = hub_repo(tmp_path / "repo")
    cache_dir = tmp_path / "cache"
    build_index(root, IndexOptions(cache_dir=cache_dir))
    db_path = cache_file(cache_dir, root.resolve())
    db_path.write_bytes(b"this is not a database" * 100)
    index = build_index(root, IndexOptions(cache_dir=cache_dir))
    assert index.stats.parsed == 13 and "rebuilt" in index.stats.cache_note
    assert build_index(root, IndexOptions(cache_dir=cache_dir)).stats.cached == 13  # usable again

    with sqlite3.connect(db_path) as db:  # one damaged row: only that file is parsed again
        db.execute("UPDATE tags SET data = '{broken' WHERE path = 'pkg/hub.py'")
    graph_file(db_path).unlink()  # (while the tree is unchanged, the saved graph is used and no row is read)
    again = build_index(root, IndexOptions(cache_dir=cache_dir))
    assert (again.stats.parsed, again.stats.cached) == (1, 12)
    assert [d.name for d in again.files["pkg/hub.py"].defs] == ["hub_service", "hub_helper"]

    with sqlite3.connect(db_path) as db:  # damaged details (decoded lazily): names survive, the map renders
        db.execute("UPDATE tags SET defs = '[[1' WHERE path = 'pkg/left.py'")
    lazy = build_index(root, IndexOptions(cache_dir=cache_dir))
    assert lazy.stats.cached == 13 and [d.name for d in lazy.files["pkg/left.py"].defs] == ["left_parse"]
    assert "left_parse" in make_repo_map(lazy, 1000).text


def test_unwritable_cache_directory_means_no_cache_not_failure(tmp_path):
    root = hub_repo(tmp_path / "repo")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    index = build_index(root, IndexOptions(cache_dir=blocker / "cache"))
    assert index.stats.parsed == 13 and "without a cache" in index.stats.cache_note


def test_cache_of_other_queries_is_dropped(tmp_path):
    root = hub_repo(tmp_path / "repo")
    cache_dir = tmp_path / "cache"
    build_index(root, IndexOptions(cache_dir=cache_dir))
    with sqlite3.connect(cache_file(cache_dir, root.resolve())) as db:
        db.execute("UPDATE meta SET value = 'old-version' WHERE key = 'version'")
    assert build_index(root, IndexOptions(cache_dir=cache_dir)).stats.parsed == 13


def test_parallel_workers_give_the_same_tags_as_one_process(tmp_path):
    root = tmp_path / "many"
    for i in range(70):
        write(root, f"m{i:02}.py", f"def function_{i}(x):\n    return helper_{i % 5}(x)\n")
    write(root, "odd\tname\nwith breaks.py", "def odd_name():\n    pass\n")
    files = select_files(make_git_repo(root), 10**6).files
    assert parse_files(files, jobs=2) == parse_files(files, jobs=1)
    items = [(f.rel, str(f.path), f.language) for f in files]
    in_worker = parse_in_worker(items)  # the subprocess itself, not its in-process fallback
    assert in_worker == dict(parse_batch(items)) and "odd\tname\nwith breaks.py" in in_worker


def test_outline_fits_the_budget_with_the_given_counter(tmp_path):
    index = build_index(sample_git_repo(tmp_path / "sample"), IndexOptions(cache_dir=None))
    ranked = rank_definitions(index.files)
    words = lambda text: len(text.split())  # a stand-in tokenizer: the budget must use the one given
    for budget in (5, 40, 120):
        fitted = fit_outline(ranked, budget, words)
        assert fitted.tokens == words(fitted.text) <= budget
        assert words(render_outline(ranked, fitted.shown + 1)) > budget or fitted.shown == len(ranked)
    assert fit_outline(ranked, 0, words).text == ""
    assert estimate_tokens(render_outline(ranked, 10)) > 0


def test_focus_arguments_resolve_to_files_or_symbols(tmp_path):
    root = sample_git_repo(tmp_path / "sample")
    index = build_index(root, IndexOptions(cache_dir=None))
    assert resolve_focus(index, ["app/report.py", "fetchUsers"], root) == ({"app/report.py"}, {"fetchUsers"})
    assert resolve_focus(index, ["store.py"], tmp_path) == ({"app/store.py"}, set())
    with pytest.raises(UsageError, match="neither a file"):
        resolve_focus(index, ["no_such_thing"], root)
