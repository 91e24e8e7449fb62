"""``clovercode serve``: load the configured backend once and serve it until SIGINT / SIGTERM."""

from __future__ import annotations

import errno
import gc
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from rich.console import Console

from clovercode.backends.registry import REPLAY_PREFIX, open_backend
from clovercode.ground.config import Config
from clovercode.ground.errors import UsageError
from clovercode.serve.connections import ConnectionCaps
from clovercode.serve.protocol import Limits
from clovercode.backends.scheduler import Scheduler
from clovercode.serve.server import ServeApp, make_server
from clovercode.trust.serve import MIN_KEY_CHARS, add_key, is_loopback, read_keys_file

READY_PREFIX = "clovercode serve: listening on "  # tests and scripts wait for this line on stdout


def served_name(cfg: Config) -> str:
    """The model id clients see: ``serve.model_name``, else a short form of the model spec."""
    if cfg["serve.model_name"]:
        return cfg["serve.model_name"]
    spec: str = cfg["model"]
    if spec.startswith(REPLAY_PREFIX):
        return "replay"
    if "/" in spec and Path(spec).expanduser().exists():
        return Path(spec).name
    return spec


def api_keys(cfg: Config) -> dict[str, str]:
    """The keys clients must send, key → tenant: the keys file's, plus ``serve.api_key`` (tenant
    "default"). On an address reachable from other machines every key must be long enough not to be
    guessed."""
    host, path, single = cfg["serve.host"], cfg["serve.api_keys_file"], cfg["serve.api_key"]
    keys = read_keys_file(Path(path).expanduser()) if path else {}
    if single:
        add_key(keys, single, "default", "serve.api_key", min_chars=0 if is_loopback(host) else MIN_KEY_CHARS)
    return keys


def require_keys(host: str, keys: dict[str, str]) -> None:
    """A server reachable from other machines must have a key: a usage error otherwise."""
    if not keys and not is_loopback(host):
        raise UsageError(f"refusing to serve on {host} without an API key: anyone who can reach this machine "
                         "could use the model and read what others send",
                         hint="Give one with CLOVERCODE_SERVE_API_KEY or --api-key KEY, or several (one per "
                              "client) with --api-keys-file FILE, one 'NAME KEY' a line; or bind --host 127.0.0.1.")


def queue_share(cfg: Config, keys: dict[str, str]) -> int:
    """Queue places one key may hold: serve.max_queue_per_key, else the queue split evenly among the
    keys (so each always finds room); 0 (no bound) for a server with one tenant."""
    if cfg["serve.max_queue_per_key"]:
        return int(cfg["serve.max_queue_per_key"])
    return max(1, cfg["serve.max_queue"] // len(keys)) if len(keys) > 1 else 0


def connection_caps(cfg: Config, keys: dict[str, str]) -> ConnectionCaps:
    """The connection caps: serve.max_connections_per_key, else the connections split evenly among
    the keys (with two or more), so one key's slow clients leave the others their share."""
    total = cfg["serve.max_connections"]
    per_key = cfg["serve.max_connections_per_key"] or (max(1, total // len(keys)) if len(keys) > 1 else 0)
    return ConnectionCaps(total, cfg["serve.max_connections_per_address"], per_key, cfg["serve.header_timeout"],
                          cfg["serve.body_timeout"])


def run_serve(cfg: Config, console: Console, *, print_line: Callable[[str], None] | None = None) -> int:
    host, port = cfg["serve.host"], cfg["serve.port"]
    keys = api_keys(cfg)
    try:  # bind before loading: a busy port should fail in a second, not after minutes of loading weights
        server = make_server(None, host, port, connection_caps(cfg, keys))
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", hint=_bind_hint(exc)) from None
    try:
        require_keys(host, keys)  # a host that cannot be bound is the first thing to fix; then the keys
        backend = open_backend(cfg)
    except BaseException:
        server.server_close()
        raise

    def log(line: str) -> None:
        console.print(f"{time.strftime('%H:%M:%S')} {line}", style="dim", highlight=False, markup=False, soft_wrap=True)

    scheduler = Scheduler(backend, max_batch=cfg["serve.max_batch"], max_queue=cfg["serve.max_queue"],
                          max_queue_per_client=queue_share(cfg, keys), log=log)
    plan_line = getattr(backend, "memory_plan_line", None)
    if scheduler.batching and plan_line is not None and (line := plan_line(scheduler.max_batch)):
        log(line)
    window = getattr(backend, "context_window", None)
    server.app = ServeApp(scheduler, served_name(cfg), Limits(cfg["max_new_tokens"], cfg["thinking"]), "",
                          cfg["serve.max_request_bytes"], window if isinstance(window, int) else None, log,
                          api_keys=keys)
    app = server.app
    previous = {sig: signal.signal(sig, lambda *_: scheduler.interrupt()) for sig in (signal.SIGINT, signal.SIGTERM)}
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    bound_host, bound_port = server.server_address[:2]
    mode = f"batching up to {scheduler.max_batch}" if scheduler.batching else "one request at a time"
    (print_line or _print_flush)(f"{READY_PREFIX}http://{bound_host}:{bound_port}/v1 (model '{app.model_name}', {mode})")
    try:
        # The model runs on this thread, the one that loaded it: on CPU a second thread would get a
        # second OpenMP pool and decode about half as fast (Scheduler.run). HTTP runs beside it.
        with _frozen_heap():
            scheduler.run()
    finally:
        log("shutting down")
        server.shutdown()
        scheduler.stop()
        time.sleep(0.2)  # let handler threads send the 503s / final events scheduler.stop() caused
        server.server_close()
        backend.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


@contextmanager
def _frozen_heap() -> Iterator[None]:
    """What is loaded now (the model's modules and tensors' Python objects, the tokenizer, the chat
    template) lives as long as the server: frozen (``gc.freeze``), the collector's oldest generation
    stops walking it, a pause of 30-120 ms with clover-tiny loaded (390,000 objects), several per
    minute of decoding, each in the middle of a step. vLLM, SGLang and TensorRT-LLM freeze their
    startup heap the same way. Serving done, the objects are the collector's again."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _bind_hint(exc: OSError) -> str:
    if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        return "Give --host an address of this machine: 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)."
    if exc.errno == errno.EACCES:
        return "Ports below 1024 need privileges: pick a higher one with --port (0 picks a free one)."
    return "Pick another port with --port (0 picks a free one)."


def _print_flush(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
