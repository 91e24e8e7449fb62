"""Run one hook: its command with the event as JSON on stdin, a timeout that kills its process
group, and output kept within a limit. A hook that cannot start or times out is a result, never an
exception: hooks are reported, never fatal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from clovercode.hooks.config import HookConfig
from clovercode.sandboxing.argv import scrubbed_env
from clovercode.sandboxing.policy import load_policy

OUTPUT_LIMIT = 10000  # characters kept of each of stdout and stderr
BLOCK = 2  # the exit code that blocks (as in Claude Code)


@dataclass(frozen=True)
class HookResult:
    hook: HookConfig
    exit_code: int | None  # None: it timed out or could not start
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    error: str = ""  # why it could not start
    seconds: float = 0.0

    @property
    def blocked(self) -> bool:
        return self.exit_code == BLOCK

    @property
    def failed(self) -> bool:
        return self.exit_code not in (0, BLOCK)

    @property
    def message(self) -> str:
        """What a blocking hook says: its stderr, else its stdout."""
        return (self.stderr.strip() or self.stdout.strip())

    def problem(self) -> str:
        """One line for a person when the hook failed (not when it blocked)."""
        where = f"{self.hook.event} hook `{self.hook.command}`"
        if self.timed_out:
            return f"{where} timed out after {self.hook.timeout:g} s and was stopped; carrying on without it"
        if self.error:
            return f"{where} could not run: {self.error}"
        said = self.message.splitlines()[-1][:200] if self.message else ""
        return f"{where} failed with exit code {self.exit_code}" + (f": {said}" if said else "") + "; carrying on"


def hook_env(hook: HookConfig, host_env: Mapping[str, str], allow: Sequence[str], deny: Sequence[str]) -> dict[str, str]:
    """What a hook's command sees: the sandbox's allowlist of ``host_env`` (never a name that looks
    like a secret), plus the variables the hook names in its ``env``, plus CLOVERCODE_PROJECT_DIR
    (set by the caller). Hooks run outside the sandbox, on files the model wrote: a token in their
    environment would be one ``conftest.py`` away from the model (pure)."""
    env = scrubbed_env(host_env, allow, deny)
    env.update({name: host_env[name] for name in hook.env if name in host_env})
    return env


def run_hook(hook: HookConfig, event: dict[str, Any], cwd: Path, env: Mapping[str, str] | None = None) -> HookResult:
    payload = json.dumps(event, ensure_ascii=False, default=str).encode("utf-8")
    started = time.monotonic()
    lists = load_policy("workspace-write")  # the environment lists are shared by every profile
    environment = hook_env(hook, os.environ if env is None else env, lists.env_allow, lists.env_deny)
    environment["CLOVERCODE_PROJECT_DIR"] = str(cwd)
    try:
        proc = subprocess.Popen(["/bin/sh", "-c", hook.command], cwd=cwd, env=environment, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        return HookResult(hook, None, error=exc.strerror or str(exc))
    try:
        try:
            out, err = proc.communicate(payload, timeout=hook.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            try:
                out, err = proc.communicate(timeout=2)
            except subprocess.TimeoutExpired:  # a grandchild outside the group holds the pipes open
                out, err = b"", b""
            return HookResult(hook, None, _text(out), _text(err), timed_out=True, seconds=time.monotonic() - started)
    except BaseException:  # Ctrl-C: never leave the hook running behind the user
        _kill_group(proc)
        proc.wait()
        raise
    return HookResult(hook, proc.returncode, _text(out), _text(err), seconds=time.monotonic() - started)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _text(data: bytes | None) -> str:
    text = (data or b"").decode("utf-8", errors="replace")
    if len(text) <= OUTPUT_LIMIT:
        return text
    half = OUTPUT_LIMIT // 2
    return f"{text[:half]}\n[… {len(text) - OUTPUT_LIMIT} characters omitted …]\n{text[-half:]}"
