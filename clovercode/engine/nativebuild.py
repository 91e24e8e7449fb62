"""Building clovercode's optional native CPU kernels (``native/*.c``): by the machine's own C compiler, on
first use, into a private cache; loaded with ctypes by the module that owns each kernel
(engine/int8native.py, engine/gdncpu.py). A machine without a compiler runs torch's paths instead.

A library is built with ``-march=native`` for this machine, so it is cached under a name that hashes the
source, the compiler, its flags and this CPU's feature flags; it is written to a private directory of
clovercode's cache (mode 0700) through a temporary file and a rename (two processes building at once each
write their own), and used only if this user owns it and nobody else may write it. The compiler is looked
for only outside the working directory: that is the project's, and nothing it holds may run outside the
sandbox.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FLAGS = ("-O3", "-march=native", "-shared", "-fPIC", "-pthread")
BUILD_TIMEOUT_S = 120


def cache_root(env: Mapping[str, str]) -> Path:
    """$XDG_CACHE_HOME/clovercode/native (the layout of sandboxing/ownpaths.py's cache directory, which
    the engine may not import)."""
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")) / ".cache")
    return Path(base).expanduser() / "clovercode" / "native"


def compiler(env: Mapping[str, str]) -> str | None:
    """The C compiler on PATH (``cc``, else ``gcc``, else ``clang``), or None. Only absolute PATH entries
    outside the working directory are searched, and the compiler itself must resolve outside it: the
    working directory is the project's, and a ``cc`` a repository holds must never run outside the
    sandbox (``.`` or an empty entry in PATH would have found it)."""
    here = os.path.realpath(os.getcwd())

    def outside(path: str) -> bool:
        real = os.path.realpath(path)
        return real != here and not real.startswith(here.rstrip(os.sep) + os.sep)

    dirs = [d for d in (env.get("PATH") or "").split(os.pathsep) if os.path.isabs(d) and outside(d)]
    if not dirs:
        return None
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name, path=os.pathsep.join(dirs))
        if found and outside(found):
            return found
    return None


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor()


def _private(path: Path) -> bool:
    """Ours, and nobody else may write it (a library another user could swap would run as us). Where
    there are no POSIX owners to ask (Windows), never."""
    if not hasattr(os, "getuid"):
        return False
    try:
        status = path.lstat()
    except OSError:
        return False
    return status.st_uid == os.getuid() and not status.st_mode & 0o022 and not path.is_symlink()


def build(source: Path, env: Mapping[str, str], libraries: tuple[str, ...] = ()) -> Path | None:
    """The library built from ``source``, compiled now if this machine has no copy yet; None without a
    compiler, on a failed build, or where the cache is not private. ``libraries``: ``-l`` names to link."""
    cc = compiler(env)
    if cc is None or not source.is_file():
        return None
    # the source and the headers beside it (they are #included from there), in a stable order
    code = b"\0".join([source.read_bytes()] + [h.read_bytes() for h in sorted(source.parent.glob("*.h"))])
    link = tuple(f"-l{name}" for name in libraries)
    key = hashlib.sha256(b"\0".join([code, os.path.realpath(cc).encode(), " ".join(FLAGS + link).encode(),
                                      platform.machine().encode(), _cpu_flags().encode()])).hexdigest()[:20]
    root = cache_root(env)
    target = root / f"{source.stem}-{key}.so"
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not _private(root):
            return None
        if target.exists():
            return target if _private(target) else None
        handle, partial = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=root)
        os.close(handle)
        try:
            done = subprocess.run([cc, *FLAGS, "-o", partial, str(source), *link], capture_output=True,
                                  timeout=BUILD_TIMEOUT_S, env=dict(env), check=False)
            if done.returncode != 0:
                return None
            os.chmod(partial, 0o700)
            os.replace(partial, target)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    except (OSError, subprocess.SubprocessError):
        return None
    return target if _private(target) else None


def load(source: Path, env: Mapping[str, str], switch: str, functions: Mapping[str, list[Any]],
         available: str | None = None, libraries: tuple[str, ...] = ()) -> Any:
    """The library built from ``source`` (:func:`build`), loaded with ctypes, each of ``functions`` given its
    argument types (every kernel returns an int status); None where it cannot be had: ``switch`` set to
    ``torch`` in ``env`` (the A/B switches of the bench and the docs), no compiler or a failed build, a
    library that will not load, or ``available`` (a function of it) saying this CPU cannot run it."""
    if env.get(switch, "") == "torch":
        return None
    path = build(source, env, libraries)
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(str(path))
    except OSError:
        return None
    if available is not None and not getattr(lib, available)():
        return None
    for name, argtypes in functions.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, ctypes.c_int
    share_openmp(lib)
    return lib


@functools.cache
def openmp_runtime() -> tuple[int, int, int] | None:
    """The addresses of GOMP_parallel, omp_get_thread_num and omp_get_num_threads in the OpenMP runtime torch
    loaded (a ``libgomp`` from torch's own folder, already in this process: never a new copy), or None
    (another runtime, another OS, none loaded). Looked up once a process, for the three kernels."""
    import torch

    folder = os.path.realpath(os.path.dirname(torch.__file__))
    try:
        with open("/proc/self/maps") as maps:
            loaded = {line.split()[-1] for line in maps if "libgomp" in line}
    except OSError:
        return None
    for path in sorted(loaded):
        if not os.path.realpath(path).startswith(folder + os.sep):
            continue
        try:
            runtime = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_LOCAL)
            names = ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads")
            return tuple(ctypes.cast(getattr(runtime, name), ctypes.c_void_p).value for name in names)  # type: ignore[return-value]
        except (OSError, AttributeError):
            continue
    return None


def share_openmp(lib: Any) -> bool:
    """Hand ``lib`` (a kernel built with native/fanout.h) torch's OpenMP runtime, so that its jobs run on
    torch's threads rather than on threads of its own beside them (fanout.h says why). Whether it did."""
    found = openmp_runtime() if os.environ.get("CLOVERCODE_NATIVE_THREADS", "") != "own" else None
    setter = getattr(lib, "clover_share_openmp", None)
    if found is None or setter is None:
        return False
    setter.argtypes, setter.restype = [ctypes.c_void_p] * 3, ctypes.c_int
    return bool(setter(*found))
