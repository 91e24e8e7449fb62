"""Containment proved from below: everything clovercode does to a project, run in-process over one
tree full of links leading out of it, under a Python audit hook (``sys.addaudithook``) that records
every open, listing, removal, rename and directory made. Any of them reaching the place the links
lead to, or anywhere else not on the allowlist (clovercode's own state, the interpreter and its
packages, this checkout, the test's own temporary files), fails the test. The project view
(trust/projectview.py) is the seam this checks: a reader that bypasses it shows up here."""

from __future__ import annotations

import io
import os
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from conftest import git, make_git_repo, tool_call_text, write_replay
from fake_github import fake_github, github_api  # noqa: F401 - fixtures
from rich.console import Console

from clovercode.front.acp.clientfs import ClientFiles, WriteLog
from clovercode.front.acp.updates import locations
from clovercode.actions.context import ToolContext
from clovercode.actions.fileio import DiskFiles
from clovercode.actions.toolbox import Toolbox
from clovercode.ground.config import load_config
from clovercode.context.index import build_index
from clovercode.context.instructions import read_instructions, render_instructions
from clovercode.context.repomap import index_options, make_repo_map
from clovercode.context.starter import starter_text
from clovercode.executors.local import LocalExecutor
from clovercode.fixflow.testrun import detect_test_command
from clovercode.front.repl.attach import expand_mentions
from clovercode.front.repl.custom import load_custom_commands
from clovercode.front.respond.command import RespondRequest, run_respond
from clovercode.front.review.command import ReviewRequest, run_review_command
from clovercode.toolcalls.validate import CheckedCall
from clovercode.vcs.checkpoint import Checkpointer, undo
from clovercode.vcs.dircheckpoint import DirStore

MARKER = "OUTSIDE-MARKER-51c9"
REPO_ROOT = Path(__file__).resolve().parents[1]
WATCHED = {"open", "os.remove", "os.rename", "os.listdir", "os.scandir", "os.mkdir", "os.rmdir", "shutil.rmtree",
           "os.symlink", "os.chmod", "os.truncate"}
_RECORDERS: list["Recorder"] = []


def _hook(event: str, args: tuple) -> None:
    if _RECORDERS and event in WATCHED:  # first test: the hook stays for the whole session, and must cost nothing
        _RECORDERS[-1].note(event, args)


sys.addaudithook(_hook)


class Recorder:
    """Collects (event, path) of every watched access outside the allowed places."""

    def __init__(self, outside: Path, allowed: list[Path]):
        self.outside = os.path.realpath(outside)
        self.allowed = [os.path.realpath(p) for p in allowed]
        self.bad: list[tuple[str, str]] = []

    def __enter__(self) -> "Recorder":
        _RECORDERS.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _RECORDERS.remove(self)

    def note(self, event: str, args: tuple) -> None:
        paths: list[tuple[object, object, bool]] = []  # (path, dir_fd, follows the last link)
        if event == "open":
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            paths.append((args[0], None, not flags & os.O_NOFOLLOW))
        elif event == "os.rename":
            paths += [(args[0], args[2], False), (args[1], args[3], False)]
        elif event == "os.symlink":
            paths.append((args[1], args[2], False))
        elif event in ("os.listdir", "os.scandir"):
            paths.append((args[0], None, True))
        else:
            paths.append((args[0], args[-1] if len(args) > 1 else None, event in ("os.chmod", "os.truncate")))
        for path, dir_fd, follows in paths:
            self._judge(event, path, dir_fd, follows)

    def _judge(self, event: str, path: object, dir_fd: object, follows: bool) -> None:
        if path is None or isinstance(path, int):
            return  # a descriptor: judged when it was opened
        text = os.fsdecode(path) if isinstance(path, (bytes, str, os.PathLike)) else str(path)
        if not os.path.isabs(text):
            if (isinstance(dir_fd, int) and dir_fd >= 0) or _from_the_view():
                return  # relative to a descriptor the project view opened beneath the root
            text = os.path.join(os.getcwd(), text)
        where = os.path.realpath(text) if follows else os.path.join(os.path.realpath(os.path.dirname(text)),
                                                                    os.path.basename(text))
        inside = lambda base: where == base or where.startswith(base.rstrip("/") + "/")  # noqa: E731
        if inside(self.outside) or not any(inside(base) for base in self.allowed):
            self.bad.append((event, text if text == where else f"{text} -> {where}"))


def _from_the_view() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.endswith(os.path.join("trust", "projectview.py")):
            return True
        frame = frame.f_back
    return False


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """(project, outside): a git repository whose links lead into ``outside`` in every way a
    repository or a sandboxed `ln -s` can make them."""
    base = tmp_path_factory.mktemp("audit")
    outside = base / "outside"
    for rel, text in {"id_rsa": f"{MARKER} key\n", "dir/a.txt": f"{MARKER} a\n", "dir/AGENTS.md": f"{MARKER} rules\n",
                      "agents.md": f"{MARKER} follow me\n", "cmd.md": f"{MARKER} command\n",
                      "commands/y.md": f"{MARKER} y\n", "calc.py": f"# {MARKER}\n",
                      "package.json": '{"scripts": {"test": "%s"}}' % MARKER}.items():
        (outside / rel).parent.mkdir(parents=True, exist_ok=True)
        (outside / rel).write_text(text)
    (outside / "__pycache__").mkdir()
    for name in ("calc.cpython-311.pyc", "mod.cpython-311.pyc"):
        (outside / "__pycache__" / name).write_bytes(b"someone else's bytecode")
    project = base / "home" / "src" / "repo"
    project.mkdir(parents=True)
    (project / "calc.py").write_text("def mean(v):\n    return sum(v) // len(v)\n")
    (project / "mod.py").write_text("import calc\n")
    (project / "docs").mkdir()
    (project / "docs" / "guide.md").write_text("the guide\n")
    (project / "sub").mkdir()
    (project / "sub" / "x.py").write_text("X = 1\n")
    (project / ".clovercode" / "commands").mkdir(parents=True)
    (project / ".clovercode" / "commands" / "ok.md").write_text("Explain $ARGUMENTS.\n")
    links = {"docs/notes.md": "../../../../outside/id_rsa", "linked": "../../../outside/dir",
             "__pycache__": "../../../outside/__pycache__", "AGENTS.md": "../../../outside/agents.md",
             "sub/AGENTS.md": "../../../../outside/dir/AGENTS.md", ".clovercode/commands/x.md": "../../../../../outside/cmd.md",
             "abs.py": str(outside / "calc.py"), "sub/up": "../..", "loop": "loop",
             "package.json": "../../../outside/package.json"}
    for rel, target in links.items():
        (project / rel).symlink_to(target)
    assert (project / "docs" / "notes.md").read_text().startswith(MARKER)  # the links do lead out
    make_git_repo(project)
    git(project, "branch", "-q", "base")
    return project, outside


def recorder(tree) -> Recorder:
    project, outside = tree
    home = Path(os.environ["HOME"])
    allowed = [project, home, Path(tempfile.gettempdir()), REPO_ROOT, Path(sys.prefix), Path(sys.base_prefix),
               Path(sys.exec_prefix), *(Path(p) for p in sys.path if p), Path(sysconfig.get_paths()["purelib"]),
               *(Path(p) for p in ("/dev", "/proc", "/sys", "/usr", "/lib", "/lib64", "/etc", "/bin"))]
    return Recorder(outside, allowed)


def call(name: str, **arguments) -> CheckedCall:
    return CheckedCall(f"call_{name}", name, arguments)


def test_the_hook_sees_a_read_or_a_delete_through_a_link(tree):
    """What makes the other tests meaningful: plain Python through a link out is caught."""
    project, _ = tree
    with recorder(tree) as seen:
        (project / "docs" / "notes.md").read_bytes()
        os.listdir(project / "linked")
        try:
            os.remove(project / "__pycache__" / "absent.pyc")
        except FileNotFoundError:
            pass
    assert [event for event, _ in seen.bad] == ["open", "os.listdir", "os.remove"]


def test_every_file_tool_and_checkpoints_stay_inside(tree):
    project, _ = tree
    env = dict(os.environ)
    ctx = ToolContext(project, LocalExecutor(), checkpoint=Checkpointer(project, env, "audit"))
    box = Toolbox(ctx)
    calls = [call("list_files"), call("list_files", path="linked"), call("list_files", path="sub", max_depth=5),
             call("search_text", pattern="."), call("search_text", pattern=".", path="linked"),
             call("search_text", pattern="OUTSIDE", path="docs/notes.md"),
             *(call("view_file", path=p) for p in ("docs/notes.md", "linked/a.txt", "AGENTS.md", "abs.py",
                                                   "sub/up/outside/id_rsa", "loop", "calc.py", "mod.py")),
             call("edit_file", path="calc.py", old_text="//", new_text="/"),
             call("write_file", path="linked/new.txt", content="x"), call("write_file", path="docs/notes.md", content="x"),
             call("write_file", path="__pycache__/new.pyc", content="x"),
             call("edit_file", path="abs.py", old_text="#", new_text="x"),
             call("apply_patch", patch="*** Begin Patch\n*** Add File: linked/p.txt\n+x\n*** End Patch"),
             call("apply_patch", patch="*** Begin Patch\n*** Delete File: docs/notes.md\n*** End Patch"),
             call("apply_patch", patch="*** Begin Patch\n*** Update File: mod.py\n@@\n-import calc\n+import calc  # used\n"
                                       "*** Move to: linked/mod.py\n*** End Patch"),
             call("run_command", command="true")]
    with recorder(tree) as seen:
        observations = [box.execute(c) for c in calls]
        restored = undo(project, env)
    texts = "\n".join(o.text for o in observations)
    assert seen.bad == []
    assert MARKER not in texts
    assert [o.ok for o in observations].count(True) == 7, texts  # the listings, the search, 2 views, the edit, true
    assert "calc.py" in restored.changed and "// len" in (project / "calc.py").read_text()
    assert all((tree[1] / "__pycache__" / n).exists() for n in ("calc.cpython-311.pyc", "mod.cpython-311.pyc"))
    assert sorted(p.name for p in (tree[1] / "dir").iterdir()) == ["AGENTS.md", "a.txt"]


def test_the_map_instructions_commands_and_attachments_stay_inside(tree):
    project, _ = tree
    env = dict(os.environ)
    cfg = load_config(project, env)
    notes: list[str] = []
    with recorder(tree) as seen:
        index = build_index(project, index_options(cfg, env))
        repo_map = make_repo_map(index, 2000)
        instructions = render_instructions(read_instructions(project, ["sub/x.py", "linked/a.txt"]))
        commands = load_custom_commands(project, env, {"help"}, notes)
        attached = expand_mentions("see @docs/notes.md @linked/a.txt @abs.py @calc.py", project, 10_000)
        tests = detect_test_command(project, lambda: True)
        starter = starter_text(project)
    assert seen.bad == []
    everything = "\n".join([str(repo_map), instructions, *(c.template for c in commands.values()), attached.text, *notes,
                            str(tests), starter])
    assert MARKER not in everything
    assert sorted(commands) == ["ok"] and "mean" in str(repo_map)
    assert len(attached.problems) == 3 and [a.shown for a in attached.attached] == ["calc.py"]


def test_a_checkpoint_outside_git_stays_inside(tree, tmp_path):
    project, _ = tree
    store = DirStore(project, tmp_path / "state")
    with recorder(tree) as seen:
        snap = store.save("checkpoints", "audit")
        (project / "sub" / "x.py").write_text("X = 2\n")
        store.restore(snap)
    assert seen.bad == []
    assert (project / "sub" / "x.py").read_text() == "X = 1\n"


def test_editor_file_routing_stays_inside(tree):
    project, _ = tree
    asked: list[str] = []

    def client(method, **params):
        asked.append(params["path"])
        return type("Read", (), {"content": "def mean(v):\n    return sum(v) // len(v)\n"})()

    files = WriteLog(ClientFiles(client, "s1", DiskFiles()))
    ctx = ToolContext(project, LocalExecutor(), files=files)
    box = Toolbox(ctx)
    with recorder(tree) as seen:
        observations = [box.execute(call("view_file", path=p)) for p in ("docs/notes.md", "linked/a.txt", "calc.py")]
        where = [locations(project, {"path": p}) for p in ("docs/notes.md", "linked/a.txt", "calc.py")]
    assert seen.bad == []
    assert [o.ok for o in observations] == [False, False, True]
    assert asked == [str(project / "calc.py")] and where[:2] == [[], []]


def test_a_review_stays_inside(tree, tmp_path):
    project, _ = tree
    git(project, "switch", "-q", "-c", "feature")
    (project / "review.py").write_text("def total(v):\n    return sum(v) + 1\n")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "total")
    model = write_replay(tmp_path / "review.jsonl", tool_call_text("search_text", pattern="."),
                         tool_call_text("view_file", path="docs/notes.md"), tool_call_text("list_files", path="linked"),
                         tool_call_text("report_finding", file="linked/a.txt", start_line="1", end_line="1",
                                        severity="low", title="t", body="b"),
                         tool_call_text("finish", summary="looked"))
    cfg = load_config(project, dict(os.environ), {"sandbox": "none", "model": f"replay:{model}", "fix.test_command": "none"})
    out = io.StringIO()
    try:
        with recorder(tree) as seen:
            outcome = run_review_command(project, cfg, ReviewRequest(base="base"), Console(file=out, width=200))
    finally:
        git(project, "switch", "-q", "main")
    assert seen.bad == []
    assert outcome.review is not None and outcome.review.trajectory is not None
    assert MARKER not in outcome.review.trajectory.read_text() + out.getvalue()
    assert outcome.review.findings == []


def test_a_respond_run_stays_inside(tree, tmp_path, fake_github):  # noqa: F811
    """A mention on a pull request whose branch holds the links: the follow-up run reads, edits and
    commits through the view, and nothing it does reaches where the links lead."""
    project, _ = tree
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    git(project, "remote", "add", "origin", origin.as_uri())
    git(project, "push", "-q", "origin", "main")
    git(project, "switch", "-q", "-c", "more")
    (project / "respond.py").write_text("def one():\n    return 2\n")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "one")
    git(project, "push", "-q", "origin", "more")
    git(project, "switch", "-q", "main")
    git(project, "branch", "-q", "-D", "more")
    fake_github.bare_repo = origin
    fake_github.add_repo("octo/repo")
    number = fake_github.add_pull("octo/repo", "more", title="one")
    ident = fake_github.add_comment("octo/repo", number, "@clovercode one() should return 1", "alice", "COLLABORATOR")
    model = write_replay(tmp_path / "respond.jsonl", tool_call_text("search_text", pattern="."),
                         tool_call_text("view_file", path="docs/notes.md"), tool_call_text("view_file", path="respond.py"),
                         tool_call_text("edit_file", path="respond.py", old_text="return 2", new_text="return 1"),
                         tool_call_text("finish", summary="one() returns 1"))
    env = {**os.environ, "GITHUB_TOKEN": "ghs_valid_token", "CLOVERCODE_GITHUB_API_URL": fake_github.url}
    cfg = load_config(project, env, {"sandbox": "none", "model": f"replay:{model}", "fix.test_command": "none"})
    out = io.StringIO()
    try:
        with recorder(tree) as seen:
            outcome = run_respond(project, cfg, RespondRequest(f"https://github.com/octo/repo/pull/{number}#issuecomment-{ident}"),
                                  Console(file=out, width=200), env)
    finally:
        git(project, "switch", "-q", "-f", "main")
    assert seen.bad == []
    assert outcome.status == "unverified", out.getvalue()  # no tests to run: the change is made, not proved
    trajectories = "".join(p.read_text() for p in Path(os.environ["HOME"]).rglob("*.jsonl"))
    assert "respond.py" in trajectories and MARKER not in trajectories + out.getvalue()
    assert outcome.pushed and "return 1" in git(project, "show", "origin/more:respond.py")
