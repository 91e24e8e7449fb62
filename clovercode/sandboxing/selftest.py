"""``clovercode sandbox check``: does bubblewrap work here, and does the policy hold?

The probe runs real commands in the sandbox inside a scratch project (never the user's), then
checks from the host what they could and could not do.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from clovercode.ground.errors import SandboxUnavailable
from clovercode.sandboxing.diagnose import INSTALL_HINT

MIN_VERSION = (0, 4, 0)  # --json-status-fd, --cap-drop, --die-with-parent, --remount-ro
CANARY_VAR = "CLOVER_SELFTEST_TOKEN"
CANARY = "selftest-canary-7f3a"

PROBE = r"""
echo "CAPEFF=$(grep '^CapEff:' /proc/self/status | cut -f2)"
echo ok > probe.txt && echo "PROJECT_WRITE=yes" || echo "PROJECT_WRITE=no"
echo pwned > "$1/outside.txt" 2>/dev/null && echo "OUTSIDE_WRITE=yes" || echo "OUTSIDE_WRITE=no"
touch .git/hooks/probe 2>/dev/null && echo "GIT_WRITE=yes" || echo "GIT_WRITE=no"
env | grep -q "$2" && echo "ENV_LEAK=yes" || echo "ENV_LEAK=no"
tr '\0' '\n' < /proc/1/environ | grep -q "$2" && echo "INIT_ENV_LEAK=yes" || echo "INIT_ENV_LEAK=no"
echo "INTERFACES=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ',')"
shift 2
for p in "$@"; do
  if [ -d "$p" ]; then [ -z "$(ls -A "$p" 2>/dev/null)" ] || echo "SECRET_VISIBLE=$p"
  else [ -z "$(head -c 1 "$p" 2>/dev/null)" ] || echo "SECRET_VISIBLE=$p"; fi
done
(sh -c 'sleep 300; :' "$MARKER" &) ; echo "DONE=yes"
"""


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str = ""
    fix: str = ""


def run_checks(policy_name: str, host_env: Mapping[str, str], scratch_parent: Path) -> list[Check]:
    """Every check in order; stops early when a later one cannot run."""
    from clovercode.executors.bwrap import BwrapExecutor
    from clovercode.sandboxing.policy import load_policy

    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return [Check("bubblewrap installed", False, "bwrap is not on PATH", INSTALL_HINT)]
    version = _version(bwrap)
    checks = [Check("bubblewrap installed", True, f"{bwrap} {'.'.join(map(str, version)) if version else '(version unknown)'}")]
    if version and version < MIN_VERSION:
        checks.append(Check("bubblewrap version", False, f"{'.'.join(map(str, version))} is older than "
                            f"{'.'.join(map(str, MIN_VERSION))}", "Upgrade bubblewrap. " + INSTALL_HINT))
        return checks
    try:
        policy = load_policy(policy_name)
    except SandboxUnavailable as exc:
        return checks + [Check(f"policy {policy_name}", False, exc.message, exc.hint or "")]
    checks.append(Check(f"policy {policy.name}", True, policy.description))
    scratch_parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="sandbox-check-", dir=scratch_parent))
    try:
        project, outside = scratch / "project", scratch / "outside"
        (project / ".git" / "hooks").mkdir(parents=True)
        outside.mkdir()
        (outside / "outside.txt").write_text("original\n")
        executor = BwrapExecutor(policy, project, {**host_env, CANARY_VAR: CANARY}, output_limit=20000, bwrap=bwrap)
        try:
            executor.run(["/bin/true"], project, 30)
        except SandboxUnavailable as exc:
            return checks + [Check("sandbox starts (user namespaces)", False, exc.message, exc.hint or "")]
        checks.append(Check("sandbox starts (user namespaces)", True))
        layout = executor.layout()
        hidden = [*layout.hidden_dirs, *layout.hidden_files]
        marker = f"clovercode-check-{scratch.name}"
        result = executor.run(["/bin/sh", "-c", f"MARKER={marker}-bg\n" + PROBE, "probe", str(outside), CANARY, *hidden],
                              project, 30)
        facts = _facts(result.output)
        checks += _judge(facts, policy.project_writable, policy.network, project, outside, len(hidden), marker)
        checks.append(_timeout_check(executor, project, marker))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return checks


def _judge(facts: dict[str, list[str]], writable: bool, network: bool, project: Path, outside: Path,
           hidden_count: int, marker: str) -> list[Check]:
    def one(key: str) -> str:
        return facts.get(key, ["?"])[0]

    policy_fix = "The sandbox policy does not hold on this host; report this with the output of this check."
    checks = [
        Check("capabilities dropped (CapEff is 0)", one("CAPEFF") == "0000000000000000", f"CapEff={one('CAPEFF')}",
              policy_fix),
        Check("project " + ("writable" if writable else "read-only"),
              (one("PROJECT_WRITE") == "yes") == writable and ((project / "probe.txt").exists() == writable),
              f"write in project: {one('PROJECT_WRITE')}", policy_fix),
        Check("writes outside the project fail", one("OUTSIDE_WRITE") == "no"
              and (outside / "outside.txt").read_text() == "original\n", "", policy_fix),
        Check(".git is read-only", one("GIT_WRITE") == "no" and not (project / ".git/hooks/probe").exists(), "", policy_fix),
        Check("environment scrubbed (also /proc/1/environ)", one("ENV_LEAK") == "no" and one("INIT_ENV_LEAK") == "no",
              "", policy_fix),
        Check(f"host secrets hidden ({hidden_count} paths here)", not facts.get("SECRET_VISIBLE"),
              ", ".join(facts.get("SECRET_VISIBLE", [])), policy_fix),
    ]
    interfaces = [i for i in one("INTERFACES").split(",") if i]
    if network:
        checks.append(Check("network shared (policy allows it)", interfaces != ["lo"], ",".join(interfaces)))
    else:
        checks.append(Check("no network (only loopback)", interfaces == ["lo"], ",".join(interfaces) or "none",
                            policy_fix))
    checks.append(Check("background processes end with the command", one("DONE") == "yes" and not _alive(f"{marker}-bg"),
                        "", policy_fix))
    return checks


def _timeout_check(executor, project: Path, marker: str) -> Check:
    result = executor.run(["/bin/sh", "-c", "sleep 300; :", f"{marker}-timeout"], project, 0.5)
    ok = result.timed_out and result.seconds < 5 and not _alive(f"{marker}-timeout")
    return Check("timeout kills the command", ok, f"{result.seconds:.1f}s", "Report this with the output of this check.")


def _facts(output: str) -> dict[str, list[str]]:
    facts: dict[str, list[str]] = {}
    for line in output.splitlines():
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Z_]+", key):
            facts.setdefault(key, []).append(value.strip())
    return facts


def _alive(marker: str) -> bool:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker.encode() in (proc / "cmdline").read_bytes():
                    return True
            except OSError:
                continue
    return False


def _version(bwrap: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    return tuple(int(g or 0) for g in match.groups()) if match else None
