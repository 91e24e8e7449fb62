"""Trust: where git's data goes is clovercode's and the user's choice, never the repository's.

A checkout handed over as a directory carries a `.git/config` the attacker wrote. It must not pick
where a push goes (`url.*.insteadOf`, `pushInsteadOf`, `pushurl`, a `remote "<url>"` section), who
hears the traffic (`http.proxy`, `remote.*.proxy`, `sslVerify`, `curloptResolve`) or what is sent
along (`http.*.extraheader`), and a local push target runs none of its hooks. Real git, real bare
remotes in tmp dirs and real HTTP listeners on 127.0.0.1 that record what reaches them."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from conftest import cli_env, git, make_git_repo, run_cli

from clovercode.ground.errors import VcsError
from clovercode.trust import gitsafe
from clovercode.vcs.git import open_checkout

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ISSUE = "format_duration(5400) gives 1h90m"
TOKEN = "TOKEN-0123456789"
PROXY_VARS = ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
              "all_proxy")


class _Recorder(BaseHTTPRequestHandler):
    """Answers every request with 401 (so git asks for credentials and tries again) and keeps it."""

    def _any(self):
        self.server.heard.append(f"{self.requestline}\n{self.headers}")  # type: ignore[attr-defined]
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="x"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_CONNECT = _any  # noqa: N815 - http.server's names

    def log_message(self, *args):
        pass


@pytest.fixture
def listener():
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    server.heard = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def no_proxy_env(monkeypatch):
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


def bare(path: Path, hook_marker: Path | None = None) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
    if hook_marker is not None:
        for name in ("pre-receive", "update", "post-receive", "post-update", "reference-transaction"):
            hook = path / "hooks" / name
            hook.write_text(f"#!/bin/sh\necho {name} >> {hook_marker}\n")
            hook.chmod(0o755)
    return path


def heads(repo: Path) -> str:
    return subprocess.run(["git", "--git-dir", str(repo), "for-each-ref", "refs/heads/"], capture_output=True,
                          text=True, check=True).stdout


@pytest.fixture
def pushed(tmp_path) -> tuple[Path, Path]:
    """(origin.git, a work tree whose main is pushed to it through a file:// URL)."""
    origin = bare(tmp_path / "origin.git")
    work = make_git_repo(tmp_path / "work")
    git(work, "remote", "add", "origin", origin.as_uri())
    git(work, "push", "-q", "origin", "main")
    git(work, "switch", "-q", "-c", "feature")
    git(work, "commit", "-q", "--allow-empty", "-m", "feature")
    return origin, work


# --- where a push goes ---------------------------------------------------------------------------

def test_fix_push_goes_to_the_remotes_url_not_where_a_repository_push_insteadof_points(tmp_path):
    origin = bare(tmp_path / "origin.git")
    work = make_git_repo(tmp_path / "durations", FIXTURES / "durations")
    git(work, "remote", "add", "origin", origin.as_uri())
    git(work, "push", "-q", "origin", "main")
    marker = tmp_path / "hooks-ran"
    evil = bare(tmp_path / "evil.git", marker)
    git(work, "config", f"url.{evil}.pushInsteadOf", origin.as_uri())
    proc = run_cli("fix", ISSUE, "--repo", str(work), "--model", f"replay:{FIXTURES / 'durations.replay.jsonl'}",
                   "--json", "--push", env=cli_env())
    assert not marker.exists()
    assert heads(evil) == ""
    assert proc.returncode == 0, proc.stderr
    branch = json.loads(proc.stdout)["branch"]
    assert f"refs/heads/{branch}" in heads(origin)
    assert origin.as_uri() in proc.stderr  # where it went is shown


@pytest.mark.parametrize("key", ["url.{evil}.insteadOf", "url.{evil}.pushInsteadOf", "remote.origin.pushurl",
                                 "remote.{origin}.url"])
def test_no_repository_redirect_moves_a_push(tmp_path, pushed, key):
    origin, work = pushed
    marker = tmp_path / "hooks-ran"
    evil = bare(tmp_path / "evil.git", marker)
    value = str(evil) if key.startswith("remote.") else origin.as_uri()
    git(work, "config", "--add", key.format(evil=evil, origin=origin.as_uri()), value)
    checkout = open_checkout(work)
    checkout.push("origin", "feature", None)
    assert "refs/heads/feature" in heads(origin)
    assert heads(evil) == "" and not marker.exists()
    assert checkout.remote_heads("origin", "feature") == {"feature": git(work, "rev-parse", "feature").strip()}


def test_a_local_push_target_runs_none_of_its_hooks(tmp_path, pushed):
    _, work = pushed
    marker = tmp_path / "hooks-ran"
    evil = bare(tmp_path / "evil.git", marker)
    git(work, "remote", "set-url", "origin", str(evil))  # the repository's own choice of remote
    open_checkout(work).push("origin", "feature", None)
    assert "refs/heads/feature" in heads(evil)
    assert not marker.exists()


def test_a_url_that_reads_as_an_option_is_refused(tmp_path, pushed):
    _, work = pushed
    git(work, "config", "remote.origin.url", f"--upload-pack=touch {tmp_path / 'ran'}")
    with pytest.raises(VcsError, match="not a URL"):
        open_checkout(work).remote_heads("origin")
    assert not (tmp_path / "ran").exists()


# --- who hears it, and what is sent along ----------------------------------------------------------

@pytest.mark.parametrize("key", ["http.proxy", "http.http://127.0.0.1:9/.proxy", "remote.origin.proxy"])
def test_a_repository_proxy_never_hears_the_users_credentials(tmp_path, listener, no_proxy_env, key):
    work = make_git_repo(tmp_path / "work")
    subprocess.run(["git", "config", "--global", "credential.helper",
                    f"!f() {{ echo username=u; echo password={TOKEN}; }}; f"], check=True)
    git(work, "remote", "add", "origin", "http://127.0.0.1:9/o/r.git")  # nothing listens there
    git(work, "config", key, f"http://127.0.0.1:{listener.server_port}")
    git(work, "config", "http.sslVerify", "false")
    git(work, "config", "http.curloptResolve", f"example.invalid:80:127.0.0.1")
    with pytest.raises(VcsError):
        open_checkout(work).remote_heads("origin")
    assert listener.heard == []


def test_a_persisted_extraheader_is_not_sent(tmp_path, listener, no_proxy_env):
    work = make_git_repo(tmp_path / "work")
    url = f"http://127.0.0.1:{listener.server_port}/"
    git(work, "remote", "add", "origin", url + "o/r.git")
    git(work, "config", f"http.{url}.extraheader", f"AUTHORIZATION: basic {TOKEN}")
    git(work, "config", "http.extraheader", f"X-Leak: {TOKEN}")
    with pytest.raises(VcsError):
        open_checkout(work).remote_heads("origin")
    assert listener.heard and not [h for h in listener.heard if TOKEN in h]


def test_the_push_token_still_reaches_its_own_host(tmp_path, listener, no_proxy_env):
    """The token clovercode adds (fix.push_token) goes with the request; the repository's does not."""
    work = make_git_repo(tmp_path / "work")
    url = f"http://127.0.0.1:{listener.server_port}/"
    git(work, "remote", "add", "origin", url + "o/r.git")
    git(work, "config", f"http.{url}.extraheader", f"X-Theirs: {TOKEN}")
    mine = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"http.{url}.extraheader", "GIT_CONFIG_VALUE_0": "X-Mine: 1"}
    with pytest.raises(VcsError):
        open_checkout(work).fetch_branch("origin", "main", "refs/clovercode/incoming/main", mine)
    assert listener.heard and all("X-Mine: 1" in h and TOKEN not in h for h in listener.heard)


def test_persisted_credentials_are_named_without_their_value():
    entries = [gitsafe.ConfigEntry("local", "http.https://github.com/.extraheader", f"AUTHORIZATION: basic {TOKEN}"),
               gitsafe.ConfigEntry("global", "http.extraheader", "X-Mine: 1"),
               gitsafe.ConfigEntry("local", "remote.origin.url", "https://x:pw@github.com/o/r.git"),
               gitsafe.ConfigEntry("local", "user.name", "Me")]
    assert gitsafe.persisted_credentials(entries) == ["http.https://github.com/.extraheader", "remote.origin.url"]


def test_the_remote_url_is_the_first_configured_one_and_never_an_option():
    entries = [gitsafe.ConfigEntry("local", "remote.origin.url", "https://github.com/o/r.git"),
               gitsafe.ConfigEntry("local", "remote.origin.url", "/tmp/second.git"),
               gitsafe.ConfigEntry("local", "remote.origin.pushurl", "/tmp/evil.git")]
    assert gitsafe.remote_url(entries, "origin") == "https://github.com/o/r.git"
    assert gitsafe.remote_url(entries, "fork") is None
    with pytest.raises(VcsError):
        gitsafe.remote_url([gitsafe.ConfigEntry("local", "remote.origin.url", "-oProxyCommand=x")], "origin")
    assert [gitsafe.is_local(u) for u in ("/srv/r.git", "file:///srv/r.git", "../r.git", "r.git",
                                         "https://github.com/o/r.git", "git@github.com:o/r.git",
                                         "ssh://git@h/r.git")] == [True, True, True, True, False, False, False]


def test_a_password_in_a_url_is_never_shown():
    assert gitsafe.shown_url("https://x:pw@github.com/o/r.git") == "https://x:***@github.com/o/r.git"
    assert gitsafe.shown_url("https://github.com/o/r.git") == "https://github.com/o/r.git"
    assert gitsafe.shown_url("/srv/r.git") == "/srv/r.git"


def test_a_repository_ca_file_gives_way_to_the_users_or_the_systems():
    theirs = [gitsafe.ConfigEntry("local", "http.sslCAInfo", "/repo/evil-ca.pem"),
              gitsafe.ConfigEntry("local", "http.https://github.com/.sslCAPath", "/repo/certs")]
    env = gitsafe.safe_env(theirs, {})
    pairs = gitsafe.config_pairs(env)
    assert ("http.sslverify", "true") in pairs
    system = gitsafe._SYSTEM_CA
    assert env.get("GIT_SSL_CAINFO") == (system.cafile or None) and env.get("GIT_SSL_CAPATH") == (system.capath or None)
    mine = [*theirs, gitsafe.ConfigEntry("global", "http.sslCAInfo", "/etc/my-ca.pem")]
    assert gitsafe.safe_env(mine, {})["GIT_SSL_CAINFO"] == "/etc/my-ca.pem"  # yours beats their URL-specific one
    assert ("http.sslCAInfo", "/etc/my-ca.pem") in gitsafe.overrides(mine)
    assert gitsafe.safe_env(theirs, {"GIT_SSL_CAINFO": "/x"}).get("GIT_SSL_CAINFO") is None  # already set: kept
