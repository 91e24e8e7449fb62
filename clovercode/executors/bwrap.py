"""The bubblewrap executor: every command in its own namespaces under a policy from sandbox/.

If bwrap cannot set the sandbox up, the command is not run: a SandboxUnavailable says why and how
to fix the host. There is no fallback to running it unsandboxed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Mapping, Sequence

from clovercode.ground.errors import SandboxUnavailable
from clovercode.executors.base import CommandResult, StopSignal
from clovercode.executors.capture import OnOutput, run_captured
from clovercode.executors.local import shell_argv
from clovercode.sandboxing.argv import Layout, bwrap_argv, sandbox_env
from clovercode.sandboxing.diagnose import INSTALL_HINT, diagnose, host_facts
from clovercode.sandboxing.policy import Policy
from clovercode.sandboxing.scrub import covered
from clovercode.sandboxing.survey import remove_created, survey


def find_bwrap() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed, so commands cannot be sandboxed",
                                 hint=INSTALL_HINT)
    return path


class BwrapExecutor:
    def __init__(self, policy: Policy, project: Path, host_env: Mapping[str, str], output_limit: int = 30000,
                 bwrap: str | None = None):
        self.policy = policy
        self.name = policy.name
        self.project = Path(project).resolve()
        self.host_env = dict(host_env)
        self.output_limit = output_limit
        self.bwrap = bwrap or find_bwrap()
        self.writable: tuple[str, ...] = ()
        self.readable: tuple[str, ...] = ()  # directories outside the project shown read-only (with_readable)
        self.stop: StopSignal | None = None  # once set, a running command is killed (with_stop)

    def _copy(self, policy: Policy | None = None) -> "BwrapExecutor":
        copy = BwrapExecutor(policy or self.policy, self.project, self.host_env, self.output_limit, self.bwrap)
        copy.writable, copy.stop, copy.readable = self.writable, self.stop, self.readable
        return copy

    def with_writable(self, paths: Sequence[Path]) -> "BwrapExecutor":
        """A copy that also lets commands write ``paths`` (existing directories outside the project)."""
        extended = self._copy()
        extended.writable = tuple(dict.fromkeys([*self.writable, *(os.path.realpath(p) for p in paths)]))
        return extended

    def with_readable(self, paths: Sequence[Path]) -> "BwrapExecutor":
        """A copy that shows ``paths`` (existing directories outside the project) read-only, at their
        own path: the user's toolchain that a fix attempt's worktree links to."""
        extended = self._copy()
        extended.readable = tuple(dict.fromkeys([*self.readable, *(os.path.realpath(p) for p in paths)]))
        return extended

    def with_policy(self, policy: Policy) -> "BwrapExecutor":
        """A copy that runs commands under ``policy`` (e.g. with CI definitions writable)."""
        return self._copy(policy)

    def with_stop(self, stop: StopSignal) -> "BwrapExecutor":
        """A copy whose commands are killed (bwrap, its namespace, every process in it) once ``stop``
        is set: a subagent's command when its parent stops (executors/base.py ``with_stop``)."""
        stoppable = self._copy()
        stoppable.stop = stop
        return stoppable

    def with_project_read_only(self) -> "BwrapExecutor":
        """A copy under which commands cannot write the project (a clean checkout's tests, fix)."""
        return self.with_policy(dataclasses.replace(self.policy, project_writable=False))

    def layout(self, cwd: Path | None = None) -> Layout:
        layout = survey(self.policy, self.project, cwd or self.project, self.host_env)
        if self.readable:
            layout = dataclasses.replace(layout, shown=self.readable)
        if not self.writable:
            return layout
        layout = dataclasses.replace(layout, writable=self.writable)
        here = os.path.realpath(cwd) if cwd is not None else ""
        # a command may also run inside a writable scratch directory (a clean checkout of a commit)
        if here and any(here == w or here.startswith(w.rstrip("/") + "/") for w in self.writable):
            layout = dataclasses.replace(layout, cwd=here)
        return layout

    def argv(self, command: str | Sequence[str], layout: Layout, status_fd: int | None = None) -> list[str]:
        return [self.bwrap, *bwrap_argv(self.policy, layout, shell_argv(command), status_fd)]

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return sandbox_env(self.policy, {**self.host_env, **(extra or {})})

    def run(self, command: str | Sequence[str], cwd: Path, timeout: float,
            env: Mapping[str, str] | None = None, on_output: OnOutput | None = None) -> CommandResult:
        layout = self.layout(cwd)
        read_fd, write_fd = os.pipe()
        status: dict = {}
        try:
            try:
                with covered(layout) as shown:
                    code, out, timed_out, omitted, seconds = run_captured(
                        self.argv(command, shown, write_fd), Path(layout.cwd), timeout, self.env(env),
                        self.output_limit, pass_fds=(write_fd,), on_output=on_output, stop=self.stop)
            finally:  # also on Ctrl-C: the namespace ends and planted protected paths go
                os.close(write_fd)
                status = _read_status(read_fd)
                end_namespace(status)
                removed = remove_created(layout)
        finally:
            os.close(read_fd)
        if not timed_out and "exit-code" not in status:
            message = out.strip()[-600:] or f"bwrap exited with code {code}"
            raise SandboxUnavailable(f"the sandbox could not start, so the command was not run: {message}",
                                     hint=diagnose(message, host_facts()))
        if removed:
            out += ("\n[clovercode removed what the command created at protected paths: " + ", ".join(removed)
                    + "; commands may not create these]")
        return CommandResult(code, out, timed_out, omitted, seconds)

    def preflight(self) -> None:
        """Start the sandbox once with a no-op, so a broken host is reported before any work."""
        self.run(["/bin/true"], self.project, 30.0)


def end_namespace(status: dict, wait: float = 5.0) -> None:
    """Kill the sandbox's PID-namespace init and wait until it is gone, which ends every process
    left in the namespace. Killing bwrap alone leaves that teardown racing our return."""
    pid, namespace = status.get("child-pid"), status.get("pid-namespace")
    if not isinstance(pid, int) or not isinstance(namespace, int):
        return
    deadline = time.monotonic() + wait
    expected = f"pid:[{namespace}]"
    signalled = False
    while time.monotonic() < deadline:
        try:
            # The pid may already belong to an unrelated process: only touch it while it is ours.
            if os.readlink(f"/proc/{pid}/ns/pid") != expected or _is_zombie(pid):
                return  # a zombie init has already killed and reaped its namespace
            if not signalled:
                os.kill(pid, signal.SIGKILL)
                signalled = True
        except (FileNotFoundError, ProcessLookupError):
            return
        except PermissionError:
            pass
        time.sleep(0.005)


def _is_zombie(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_bytes()  # closed at once: this runs in a tight loop
    return stat[stat.rindex(b")") + 2:][:1] in (b"Z", b"X")


def _read_status(fd: int) -> dict:
    """Merge bwrap's --json-status-fd records (one JSON object per line)."""
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    status: dict = {}
    for line in b"".join(chunks).decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            status.update(record)
    return status
