"""AGENTS.md discovery: the root file, then those on the way to every directory the task touches."""

from pathlib import Path

from clovercode.context.assemble import mentioned_paths
from clovercode.context.instructions import (MAX_INSTRUCTION_BYTES, instruction_dirs, read_instructions,
                                             render_instructions)


def tree(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    for rel, text in {"AGENTS.md": "root rules\n", "src/AGENTS.md": "src rules\n", "src/api/AGENTS.md": "api rules\n",
                      "docs/AGENTS.md": "docs rules\n", "src/api/routes.py": "", "src/core/engine.py": ""}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_root_and_touched_directories_in_order(tmp_path):
    root = tree(tmp_path)
    assert [f.rel for f in read_instructions(root)] == ["AGENTS.md"]
    files = read_instructions(root, ["src/api/routes.py", "src/core/engine.py"])
    assert [f.rel for f in files] == ["AGENTS.md", "src/AGENTS.md", "src/api/AGENTS.md"]  # not docs/
    assert [f.text for f in files] == ["root rules\n", "src rules\n", "api rules\n"]  # verbatim
    assert [f.rel for f in read_instructions(root, [str(root / "docs")])] == ["AGENTS.md", "docs/AGENTS.md"]
    assert instruction_dirs(root, ["../outside.py", "/etc/passwd", "."]) == [""]


def test_rendered_block_quotes_each_file_whole(tmp_path):
    root = tree(tmp_path)
    text = render_instructions(read_instructions(root, ["src/api/routes.py"]))
    assert "## AGENTS.md\nroot rules" in text and "## src/api/AGENTS.md\napi rules" in text
    assert render_instructions([]) == ""


def test_oversized_instruction_file_is_noted_not_included(tmp_path):
    root = tree(tmp_path)
    (root / "AGENTS.md").write_text("x" * (MAX_INSTRUCTION_BYTES + 1))
    (only,) = read_instructions(root)
    assert "larger than" in only.text and len(only.text) < 200


def test_paths_written_in_the_task_count_as_touched(tmp_path):
    root = tree(tmp_path)
    assert mentioned_paths(root, "Fix src/api/routes.py, not ./src/core/engine.py; nothing in lib/x.py.") == {
        "src/api/routes.py", "src/core/engine.py"}
    assert mentioned_paths(root, "a" * 5000 + ".py") == set()


def test_a_path_longer_than_the_os_allows_is_skipped(tmp_path):
    # a model's path argument, valid to its schema, once named a 4,000-character "directory"
    assert instruction_dirs(tmp_path, ["<p>\n" * 1000 + "x.py", "src/a.py"]) == ["", "src"]
