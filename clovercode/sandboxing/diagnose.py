"""Turn a bubblewrap failure into an actionable fix for this host."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

INSTALL_HINT = ("Install bubblewrap: `sudo apt-get install bubblewrap` (Debian/Ubuntu), `sudo dnf install bubblewrap` "
                "(Fedora), `sudo pacman -S bubblewrap` (Arch), `apk add bubblewrap` (Alpine).")
OPT_OUT = ("Only if this machine or container is itself disposable, `--sandbox none` runs commands without a sandbox "
           "(a loudly-warned opt-out).")


@dataclass(frozen=True)
class HostFacts:
    """Kernel switches that decide whether unprivileged user namespaces work."""

    userns_clone: str | None = None  # kernel.unprivileged_userns_clone (Debian kernels)
    max_user_namespaces: str | None = None  # user.max_user_namespaces
    apparmor_restrict: str | None = None  # kernel.apparmor_restrict_unprivileged_userns (Ubuntu 23.10+)
    in_container: bool = False


def host_facts() -> HostFacts:
    def read(path: str) -> str | None:
        try:
            return Path(path).read_text().strip()
        except OSError:
            return None

    container = os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv")
    return HostFacts(read("/proc/sys/kernel/unprivileged_userns_clone"), read("/proc/sys/user/max_user_namespaces"),
                     read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"), container)


def diagnose(message: str, facts: HostFacts) -> str:
    """A fix for the bwrap error ``message`` on a host described by ``facts``."""
    text = message.lower()
    if "namespace" in text or "uid map" in text or ("operation not permitted" in text and "proc" not in text):
        return _userns_fix(facts)
    if "proc" in text:
        return ("bubblewrap cannot mount a fresh /proc for the new PID namespace; containers often mask /proc. "
                "Run the container with `--security-opt systempaths=unconfined` (Docker) or `--privileged`. " + OPT_OUT)
    if "can't find source path" in text:
        return "A path changed while the sandbox was being set up; run the command again."
    return "Run `clovercode sandbox check` to test this host's sandbox support. " + OPT_OUT


def _userns_fix(facts: HostFacts) -> str:
    fixes = []
    if facts.userns_clone == "0":
        fixes.append("enable unprivileged user namespaces: `sudo sysctl -w kernel.unprivileged_userns_clone=1`")
    if facts.max_user_namespaces == "0":
        fixes.append("allow user namespaces: `sudo sysctl -w user.max_user_namespaces=15000`")
    if facts.apparmor_restrict == "1":
        fixes.append("AppArmor blocks unprivileged user namespaces: add an AppArmor profile for bwrap "
                     "or `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`")
    if facts.in_container:
        fixes.append("inside Docker/Podman the default seccomp profile blocks namespaces: run the container with "
                     "`--security-opt seccomp=unconfined --security-opt apparmor=unconfined`")
    if not fixes:
        fixes.append("user namespaces are unavailable; check `sysctl user.max_user_namespaces` and your security modules")
    return "bubblewrap could not create its namespaces. Fix: " + "; ".join(fixes) + ". " + OPT_OUT
