"""Shared fixtures: an isolated home for every test, real git repositories, the real CLI."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import realhome

# Read before configure points HOME at a stand-in: the home the session-end check guards. xdist's
# workers start after that, so the controller hands them the real one by name.
REAL_HOME_VARIABLE = "CLOVER_TEST_REAL_HOME"
REAL_HOME = Path(os.environ.get(REAL_HOME_VARIABLE) or os.environ.get("HOME") or Path.home())
REAL_HOME_WATCH = pytest.StashKey["realhome.Watch"]()
STAND_IN_HOME = pytest.StashKey[Path]()
REPO_ROOT = Path(__file__).resolve().parent.parent


def threads_per_worker() -> int:
    """CPU threads one xdist worker's math may use: the cores shared out among the workers (at least 1).
    Two workers that each start torch, OpenMP and llama.cpp with a thread per core, on two cores, spend
    the difference spinning against each other."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // workers) if workers else cores


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker more than the cores on a small machine. A fifth of the suite's time is spent
    waiting (on subprocesses, servers, sandboxes, pseudo-terminals): two workers on two cores kept them
    163 % busy; the third fills the waits (one math thread each, below)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores + 1 if cores <= 4 else cores


# Set before any test module imports torch; subprocesses (the CLI, serve, llama.cpp) inherit it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_name, str(threads_per_worker()))
EXAMPLES = REPO_ROOT / "examples"
SLOW_TESTS = Path(__file__).resolve().parent / "slow_tests.txt"


def slow_tests() -> set[str]:
    """The node ids and files tests/slow_tests.txt marks slow (its last column)."""
    lines = SLOW_TESTS.read_text(encoding="utf-8").splitlines()
    return {line.split()[-1] for line in lines if line.strip() and not line.startswith("#")}


def pytest_collection_modifyitems(config, items):
    """The measured slow tests get the `slow` marker, so `-m "not slow"` is the fast tier."""
    slow = slow_tests()
    for item in items:
        if item.nodeid in slow or item.nodeid.split("::", 1)[0] in slow:
            item.add_marker(pytest.mark.slow)
    if getattr(config.option, "dist", "no") == "loadfile":
        from schedule import longest_first

        longest_first(items)


@pytest.fixture(autouse=True)
def restored_signal_handlers(request):
    """A test that runs clovercode in-process may leave its handlers for the ending signals installed
    (or ignored: the CLI absorbs them at its end); the next test on the same worker gets the handlers
    it had, so a Ctrl-C test there still gets its KeyboardInterrupt and children are not started with
    SIGTERM ignored. A test that leaves the main thread's signal mask changed fails: a blocked SIGINT
    is inherited by every process the worker starts after it."""
    signums = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    saved = {signum: signal.getsignal(signum) for signum in signums}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    yield
    for signum, handler in saved.items():
        if handler is not None and signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)
    left = signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if left != mask:
        pytest.fail(f"{request.node.nodeid} left signals blocked: {sorted(left - mask)}", pytrace=False)


@pytest.fixture(autouse=True)
def fresh_ending():
    """A signal one in-process test sends ends that test's run only (termination.ENDING is process-wide)."""
    yield
    from clovercode.ground.termination import ENDING

    ENDING.__init__()


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory, monkeypatch):
    """No test reads or writes the real home (config, state, cache, git's global and system config)
    or sees CLOVERCODE_* settings."""
    home = tmp_path_factory.mktemp("home")
    for name in list(os.environ):
        if name.startswith("CLOVERCODE_"):
            monkeypatch.delenv(name)
    point_home_at(home, monkeypatch.setenv)
    return home


def person_pip_cache() -> Path:
    """The person's pip cache, read from the password database: HOME is the test's own."""
    return Path(os.environ.get("PIP_CACHE_DIR") or Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "pip")


def shared_with_the_suite() -> list[str]:
    """What under the real home the suite writes on purpose, relative to it; each with its reason."""
    shared = []
    # The install tests reuse the person's pip cache (install_helpers.py): wheels downloaded once serve
    # every test venv, and pip adds what it downloads.
    pip = person_pip_cache().resolve()
    if pip.is_relative_to(REAL_HOME.resolve()):
        shared.append(str(pip.relative_to(REAL_HOME.resolve())))
    return shared


HOME_VARIABLES = ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "GIT_CONFIG_GLOBAL")


def point_home_at(home: Path, setenv) -> None:
    """HOME, the XDG directories and git's global config all under ``home``; git's system config off."""
    setenv("HOME", str(home))
    setenv("XDG_CONFIG_HOME", str(home / ".config"))
    setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    setenv("XDG_CACHE_HOME", str(home / ".cache"))
    # An exported GIT_CONFIG_GLOBAL would otherwise beat HOME, and /etc/gitconfig is the host's.
    setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    setenv("GIT_CONFIG_NOSYSTEM", "1")


def compile_the_package() -> None:
    """What scripts/setup.sh does at install: clovercode's bytecode written once, before the workers start.
    Where the environment sets PYTHONDONTWRITEBYTECODE (CI images do) every CLI process the suite starts
    would otherwise compile what it imports again: 0.2-0.4 s each, over a thousand of them."""
    import compileall

    compileall.compile_dir(str(REPO_ROOT / "clovercode"), quiet=2, workers=0)


def pytest_configure(config):
    """Start watching the real home (once per run: under pytest-xdist the controller watches, not each worker),
    and point every process at a stand-in home before collection: a module-level constant, or a module or
    session fixture, built from the environment before any test's own home exists, never sees the real one."""
    if not hasattr(config, "workerinput"):
        config.stash[REAL_HOME_WATCH] = realhome.watch(REAL_HOME)
        compile_the_package()
    os.environ[REAL_HOME_VARIABLE] = str(REAL_HOME)
    stand_in = Path(tempfile.mkdtemp(prefix="clovercode-test-home-"))
    config.stash[STAND_IN_HOME] = stand_in
    point_home_at(stand_in, lambda name, value: os.environ.__setitem__(name, value))


def pytest_unconfigure(config):
    stand_in = config.stash.get(STAND_IN_HOME, None)
    if stand_in is not None:
        shutil.rmtree(stand_in, ignore_errors=True)


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when anything under the real home changed while it ran, naming what changed."""
    watch = session.config.stash.get(REAL_HOME_WATCH, None)
    if watch is None:
        return
    ignore = ":".join([os.environ.get("CLOVER_TEST_HOME_IGNORE", ""), *shared_with_the_suite()])
    changed = realhome.changed_since(watch, ignore=ignore)
    if changed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = [f"the test run changed the real home {REAL_HOME}:", *(f"  {path}" for path in changed[:50])]
        if len(changed) > 50:
            lines.append(f"  … and {len(changed) - 50} more")
        lines.append("(other programs writing there meanwhile? CLOVER_TEST_HOME_IGNORE=GLOB:GLOB, relative to the home)")
        if reporter is not None:
            reporter.write_sep("=", "real home changed", red=True)
            reporter.write_line("\n".join(lines))
        else:
            sys.stderr.write("\n".join(lines) + "\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout


def git_repo_with_origin(tmp_path: Path, source: Path) -> tuple[Path, Path]:
    """A bare ``origin.git`` (default branch main) and a clone-like repository of ``source`` that pushed main to it."""
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    work = make_git_repo(tmp_path / source.name, source)
    git(work, "remote", "add", "origin", origin.as_uri())
    git(work, "push", "-q", "origin", "main")
    return origin, work


def make_git_repo(path: Path, source: Path | None = None) -> Path:
    """A real git repository at ``path`` (a copy of ``source`` if given) with one commit."""
    if source is not None:
        shutil.copytree(source, path)
    else:
        path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.invalid")
    git(path, "add", "-A")
    git(path, "commit", "-q", "--allow-empty", "-m", "initial")
    return path


@pytest.fixture
def calc_repo(tmp_path) -> Path:
    """The demo project (a real bug, real unittest tests) as a fresh git repository."""
    return make_git_repo(tmp_path / "calc", EXAMPLES / "calc")


def cli_env(**extra: str) -> dict[str, str]:
    """Environment for running this checkout's CLI in a subprocess."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120,
            input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m clovercode ARGS`` from this checkout as a real subprocess."""
    return subprocess.run([sys.executable, "-m", "clovercode", *args], cwd=cwd, env=env or cli_env(),
                          capture_output=True, text=True, timeout=timeout, input=input)


def tool_call_text(name: str, **params: str) -> str:
    """A Qwen3-Coder XML tool call, as a model (or a replay standing in for one) writes it."""
    body = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def write_replay(path: Path, *turns: str) -> Path:
    """A replay model file: one recorded turn of text per line (``--model replay:PATH``)."""
    path.write_text("".join(json.dumps({"text": turn}) + "\n" for turn in turns))
    return path


def default_sigint() -> None:
    """``preexec_fn`` of a child that a test interrupts (SIGINT, Ctrl-C on a pty): the default
    disposition back. pytest started with SIGINT ignored (``nohup``, ``cmd &`` in a script, some CI
    runners) hands the ignore down through fork and exec, Python then installs no KeyboardInterrupt
    handler, and the child never sees the Ctrl-C the test sends. clovercode itself keeps an ignored
    SIGINT ignored, as a background job should."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
