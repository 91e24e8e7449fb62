"""``clovercode bench serve``: N simulated CI bots against real ``clovercode serve`` processes.

One run measures three ways of answering the same requests, side by side (and with ``--bound``, what
batching can gain at most, measured between the modes: ``BoundProbe``):
- one at a time: a single client, each request after the previous one (the baseline);
- queued: N concurrent clients, the server generating one request at a time (``--max-batch 1``);
- batched: N concurrent clients, the server batching up to N requests per decoding step.
It prints throughput, p50/p95 latency and time to first token for each, and the ratios to the
baseline. It also checks what must hold under load: no request lost, no reply mixed up with another
(every reply must equal the baseline's reply to the same prompt: the model is greedy and
deterministic), and a client killed mid-stream is noticed and cancelled without stalling the rest.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clovercode.backends.sse import iter_sse_data
from clovercode.ground.errors import ModelUnavailable

KILLED_CLIENT = r"""
import http.client, json, sys, time
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=60)
body = {"model": sys.argv[2], "stream": True, "max_tokens": 100000, "user": "killed-bot",
        "messages": [{"role": "user", "content": "a long job whose client dies"}]}
conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
response = conn.getresponse()
response.readline()
print("streaming", flush=True)
time.sleep(3600)
"""


@dataclass
class Reply:
    key: str
    ok: bool = False
    text: str = ""
    finish: str | None = None
    tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the server took from a kept prompt's cache
    latency: float = 0.0
    first_token: float | None = None
    response_id: str | None = None
    error: str | None = None


@dataclass
class ModeResult:
    name: str
    wall: float
    replies: list[Reply]
    health: dict[str, Any]
    killed: dict[str, Any] | None = None
    mixed: list[str] = field(default_factory=list)

    @property
    def completed(self) -> list[Reply]:
        return [r for r in self.replies if r.ok]

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.completed)

    def summary(self) -> dict[str, Any]:
        done = self.completed
        latencies = sorted(r.latency for r in done)
        firsts = sorted(r.first_token for r in done if r.first_token is not None)
        return {"mode": self.name, "requests": len(self.replies), "completed": len(done),
                "lost": len(self.replies) - len(done), "mixed_up": len(self.mixed), "seconds": round(self.wall, 3),
                "requests_per_s": round(len(done) / self.wall, 3) if self.wall else None,
                "tokens_per_s": round(self.tokens / self.wall, 1) if self.wall else None,
                "latency_p50_s": _pct(latencies, 50), "latency_p95_s": _pct(latencies, 95),
                "first_token_p50_s": _pct(firsts, 50), "mean_batch": self.health.get("mean_batch"),
                "pass_ms": self.health.get("pass_ms"), "queue_wait_ms": self.health.get("queue_wait_ms"),
                "prefill_s": self.health.get("prefill_s"), "alone_passes": self.health.get("alone_passes"),
                "prompt_tokens": sum(r.prompt_tokens for r in done), "cached_prompt_tokens": sum(r.cached_tokens for r in done),
                "errors": sorted({r.error for r in self.replies if r.error})[:5], "killed_client": self.killed}


def _pct(values: list[float], pct: int) -> float | None:
    if not values:
        return None
    rank = max(0, min(len(values) - 1, round(pct / 100 * len(values) + 0.5) - 1))
    return round(values[rank], 4)


class ServerProcess:
    """A real ``clovercode serve`` subprocess on 127.0.0.1 with a free port."""

    def __init__(self, model: str, max_batch: int, max_queue: int, env: dict[str, str] | None = None):
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(env or os.environ)
        env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "clovercode", "serve", "--model", model, "--port", "0",
             "--max-batch", str(max_batch), "--max-queue", str(max_queue)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.port = 0
        self.model_name = ""

    def wait_ready(self, timeout: float = 300.0) -> None:  # an engine model loads for a while on a busy machine
        assert self.proc.stdout is not None
        ready: list[str] = []
        reader = threading.Thread(target=lambda: ready.append(self.proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        line = ready[0] if ready else ""
        if "listening on http://" not in line:
            self.stop()
            stderr = self.proc.stderr.read() if self.proc.stderr else ""
            raise ModelUnavailable(f"clovercode serve did not start: {(stderr or line).strip()[-800:]}")
        self.port = int(line.split("listening on http://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
        self.model_name = line.split("(model '", 1)[1].split("'", 1)[0]

    def health(self) -> dict[str, Any]:
        return json.loads(self._call("GET", "/health", 10)[1])

    def reset_prefix_cache(self) -> None:
        """Drop the prompts the server keeps for reuse, so a mode does not start with what the one
        before it left (the same prompts again would be served from the cache)."""
        status, _ = self._call("POST", "/reset_prefix_cache", 60)
        if status != 200:
            raise ModelUnavailable(f"clovercode serve refused to reset its prompt cache (HTTP {status})")

    def _call(self, method: str, path: str, timeout: float) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def stream_chat(port: int, body: dict[str, Any], key: str, timeout: float = 300.0) -> Reply:
    """One streaming chat completion with the standard library, timed from send to [DONE]."""
    reply = Reply(key)
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            reply.error = f"HTTP {response.status}: {response.read()[:200].decode(errors='replace')}"
            return reply
        parts: list[str] = []
        for data in iter_sse_data(response.readline):
            if data == "[DONE]":
                reply.ok = reply.finish is not None
                break
            chunk = json.loads(data)
            if "error" in chunk:
                reply.error = chunk["error"].get("message")
                break
            reply.response_id = chunk.get("id", reply.response_id)
            if chunk.get("usage"):
                reply.tokens = chunk["usage"]["completion_tokens"]
                reply.prompt_tokens = chunk["usage"].get("prompt_tokens") or 0
                reply.cached_tokens = (chunk["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            for choice in chunk.get("choices") or ():
                # calls count as the reply too (their ids are random: name and arguments only)
                parts += [json.dumps(c.get("function"), sort_keys=True) for c in choice["delta"].get("tool_calls") or ()]
                text = choice["delta"].get("content")
                if text:
                    if reply.first_token is None:
                        reply.first_token = time.monotonic() - started
                    parts.append(text)
                reply.finish = choice.get("finish_reason") or reply.finish
        reply.text = "".join(parts)
        if not reply.ok and reply.error is None:
            reply.error = "the stream ended without [DONE]"
    except (OSError, http.client.HTTPException, json.JSONDecodeError) as exc:
        reply.error = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
        reply.latency = time.monotonic() - started
    return reply


def workload(clients: int, requests: int, max_tokens: int, model: str,
             conversations: bool = False) -> list[list[tuple[str, dict[str, Any]]]]:
    """Per client, its requests in order: each prompt is unique, so a mixed-up reply shows. With
    ``conversations`` a client's requests are the turns of one conversation: each later request
    carries only its new user message here, and is sent after the last turn and its reply
    (``_with_history``), as an agent's next turn is."""
    plan = []
    for c in range(clients):
        jobs = []
        for r in range(requests):
            key = f"bot{c}-job{r}"
            body = {"model": model, "stream": True, "stream_options": {"include_usage": True}, "max_tokens": max_tokens,
                    "temperature": 0, "user": f"ci-bot-{c}"}
            if conversations and r:
                body["messages"] = [{"role": "user", "content": f"CI bot {c}: the tests still fail at step {r}; "
                                     f"look at module_{r}.py line {c * 13 + r}"}]
                body[FOLLOWS] = True
            else:
                body["messages"] = [{"role": "system", "content": "You fix failing CI jobs."},
                                    {"role": "user", "content": f"CI bot {c}, job {r}: test_case_{c * 31 + r * 7} fails with "
                                     f"AssertionError in module_{r}.py line {c * 13 + r}"}]
            jobs.append((key, body))
        plan.append(jobs)
    return plan


FOLLOWS = "_follows"  # a workload body that continues its client's conversation (never sent)


def _with_history(body: dict[str, Any], history: dict[str, list[dict[str, Any]]], reply: Reply | None) -> dict[str, Any]:
    """The body to send: a follow-up turn gets its client's conversation so far in front of it."""
    client = body["user"]
    if not body.get(FOLLOWS):
        history[client] = list(body["messages"])
        return body
    messages = history.get(client, []) + [{"role": "assistant", "content": reply.text if reply else ""}, *body["messages"]]
    history[client] = messages
    return {k: v for k, v in body.items() if k != FOLLOWS} | {"messages": messages}


def run_mode(name: str, server: ServerProcess, plan: list[list[tuple[str, dict[str, Any]]]], *, concurrent: bool,
             kill_one: bool) -> ModeResult:
    server.reset_prefix_cache()
    before = server.health()
    killed = _start_killed_client(server) if kill_one else None
    replies: list[Reply] = []
    lock = threading.Lock()

    def bot(jobs: list[tuple[str, dict[str, Any]]]) -> None:
        history: dict[str, list[dict[str, Any]]] = {}  # client → its conversation so far
        last: dict[str, Reply] = {}
        for key, body in jobs:
            body = _with_history(body, history, last.get(body["user"]))
            reply = last[body["user"]] = stream_chat(server.port, body, key)
            with lock:
                replies.append(reply)

    started = time.monotonic()
    if concurrent:
        threads = [threading.Thread(target=bot, args=(jobs,)) for jobs in plan]
        for thread in threads:
            thread.start()
        watcher = _kill_and_watch(server, killed, before) if killed is not None else None
        for thread in threads:
            thread.join()
        wall = time.monotonic() - started
        if watcher is not None:
            _unless_finished_first(server, killed, before, sum(r.ok for r in replies))  # type: ignore[arg-type]
            watcher.join()
    else:
        bot([job for jobs in plan for job in jobs])
        wall = time.monotonic() - started
    health = server.health()
    steps = health["batch_steps"] - before["batch_steps"]
    health["mean_batch"] = round((health["batch_rows"] - before["batch_rows"]) / steps, 2) if steps else 1.0
    spent, was = health.get("timeline_s") or {}, before.get("timeline_s") or {}
    health["pass_ms"] = {k: round(1000 * (spent[k] - was.get(k, 0.0)) / steps, 2) for k in spent} if steps else None
    if "prefill" in spent:  # the prefills' seconds, and the passes of the requests decoded alone (bench: the ceiling)
        health["prefill_s"] = round(spent["prefill"] - was.get("prefill", 0.0), 6)
        health["alone_passes"] = health.get("alone_passes", 0) - before.get("alone_passes", 0)
    taken = health.get("started", 0) - before.get("started", 0)
    health["queue_wait_ms"] = (round(1000 * (health.get("queue_wait_s", 0.0) - before.get("queue_wait_s", 0.0)) / taken, 2)
                               if taken else None)  # per request, from its arrival to the model taking it
    return ModeResult(name, wall, replies, health, killed.get("report") if killed is not None else None)


def _start_killed_client(server: ServerProcess) -> dict[str, Any]:
    proc = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, str(server.port), server.model_name],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # its stream has started: it holds the model
    if "streaming" not in line:
        proc.kill()
        raise ModelUnavailable(f"the killed-client probe could not start a stream: {proc.stderr.read() if proc.stderr else ''}")
    return {"proc": proc}


def _kill_and_watch(server: ServerProcess, killed: dict[str, Any], before: dict[str, Any],
                    limit: float = 30.0) -> threading.Thread:
    """SIGKILL the probe client now; a thread records how soon the server cancels its request."""
    killed["proc"].kill()
    killed["proc"].wait()
    kill_at = time.monotonic()
    killed["report"] = {"cancelled": False, "noticed_within_s": None}
    killed["settled"] = threading.Event()

    def watch() -> None:
        while time.monotonic() - kill_at < limit and not killed["settled"].is_set():
            if server.health()["cancelled"] > before["cancelled"]:
                killed["report"] = {"cancelled": True, "noticed_within_s": round(time.monotonic() - kill_at, 3)}
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _unless_finished_first(server: ServerProcess, killed: dict[str, Any], before: dict[str, Any], answered: int) -> None:
    """A model that ends its turn quickly (clover-tiny writes one short call) may finish the probe's
    request before the kill reaches the server: then there is nothing to cancel, which the server's
    counters show (one more completed request than the clients got), and the watch stops."""
    health = server.health()
    if health["cancelled"] == before["cancelled"] and health["completed"] - before["completed"] > answered:
        killed["report"] = {"cancelled": False, "noticed_within_s": None, "finished_before_kill": True}
        killed["settled"].set()


def run_bench(model: str = "tiny", clients: int = 8, requests: int = 3, max_tokens: int = 48,
              bound: bool = False, conversations: bool = False, agents: bool = False) -> dict[str, Any]:
    """``agents``: as many tool-carrying clients again beside the plain ones (bench/serveagents.py)."""
    from clovercode.bench.serveagents import agents_workload

    total = clients * (2 if agents else 1)
    queued_server = ServerProcess(model, 1, total * requests + 8)
    # one row more than the clients: the killed-client probe's request takes a row of its own while it
    # lasts, instead of keeping a client's first request waiting (which pushed that client's every
    # request, and a tail of steps at one or two rows, past the others)
    batched_server = ServerProcess(model, total + 1, total * requests + 8)
    probe = BoundProbe(model, total) if bound else None
    try:
        queued_server.wait_ready()
        batched_server.wait_ready()
        plan = workload(clients, requests, max_tokens, queued_server.model_name, conversations)
        if agents:
            plan = agents_workload(plan)
        # an agents run warms up with a tool request too: the first one builds the grammar compiler
        # (about 2 s on CPU), which would otherwise land in whichever mode sends the first
        first = [plan[0][:1]] + ([plan[clients][:1]] if agents else [])
        warm = run_mode("warm-up", queued_server, first, concurrent=False, kill_one=False)
        run_mode("warm-up", batched_server, first, concurrent=False, kill_one=False)
        if probe is not None:  # prompts as long as the served ones, with room for the tokens asked for
            served = [r.prompt_tokens for r in warm.completed if r.prompt_tokens] or [64]
            probe.prompt_tokens = (min(served), max(served) + max_tokens * (requests if conversations else 1))
            probe.sample("before one-by-one")
        baseline = run_mode("one-by-one", queued_server, plan, concurrent=False, kill_one=False)
        if probe is not None:
            probe.sample("after one-by-one")
        queued = run_mode("queued", queued_server, plan, concurrent=True, kill_one=True)
        if probe is not None:
            probe.sample("after queued")
        batched = run_mode("batched", batched_server, plan, concurrent=True, kill_one=True)
        if probe is not None:
            probe.sample("after batched")
    finally:
        queued_server.stop()
        batched_server.stop()
        if probe is not None:
            probe.close()
    reference = {r.key: r.text for r in baseline.completed}
    modes = [baseline, queued, batched]
    for mode in modes:
        mode.mixed = [r.key for r in mode.completed if r.key in reference and r.text != reference[r.key]]
        ids = [r.response_id for r in mode.completed]
        if len(set(ids)) != len(ids):
            mode.mixed.append("duplicate response ids")
    base_rps = baseline.summary()["requests_per_s"] or 0.0
    base_p95 = baseline.summary()["latency_p95_s"] or 0.0
    rows = [m.summary() for m in modes]
    for row in rows:
        row["throughput_vs_one_at_a_time"] = round(row["requests_per_s"] / base_rps, 2) if base_rps and row["requests_per_s"] else None
        row["p95_latency_vs_one_at_a_time"] = round(row["latency_p95_s"] / base_p95, 2) if base_p95 and row["latency_p95_s"] else None
    ok = all(r["lost"] == 0 and r["mixed_up"] == 0 for r in rows) and all(
        r["killed_client"]["cancelled"] or r["killed_client"].get("finished_before_kill")
        for r in rows if r["killed_client"] is not None)
    fb = probe.report() if probe is not None else None
    gain = rows[-1]["throughput_vs_one_at_a_time"]
    return {"model": model, "clients": total, "requests_per_client": requests, "max_tokens": max_tokens,
            "conversations": conversations, "agents": agents, "modes": rows, "ok": ok, "forward_bound": fb,
            "batching_ceiling": batching_ceiling(rows[0], rows[-1], fb),
            # what batching achieved of what its forward allows, both from this run
            "batched_vs_bound": round(gain / fb["bound"], 2) if fb and gain and fb["bound"] else None}


def batching_ceiling(alone: dict[str, Any], batched: dict[str, Any], fb: dict[str, Any] | None) -> dict[str, Any] | None:
    """The most the batched mode could gain over the one-by-one mode on this run's work. Batched, each
    request makes the passes it makes alone (its reply is the same), so the batched mode has at least
    the one-by-one mode's passes to run: at best every one in a full batch at the bound's cost per row,
    and at least the prefills it did run; nothing else counted (no host work, HTTP, waits or partial
    batches), so no scheduling of these passes on this forward does better here. None without the bound
    or the counts."""
    passes, alone_s, batched_prefill = alone.get("alone_passes"), alone.get("seconds"), batched.get("prefill_s")
    if not fb or not passes or not alone_s or batched_prefill is None:
        return None
    forwards = passes * fb["batched_forward_ms"] / 1e3 / fb["rows"]
    gain = alone_s / (forwards + batched_prefill)
    return {"passes": passes, "full_batch_forwards_s": round(forwards, 4), "batched_prefill_s": batched_prefill,
            "one_by_one_prefill_s": alone.get("prefill_s"), "gain": round(gain, 2), "of_bound": round(gain / fb["bound"], 2)}


class BoundProbe:
    """What batching can gain on this machine, measured in the bench's own process between the modes
    it bounds (while both servers sit idle), so that a burst of load from other processes is seen by
    the bound as by the modes: one batched forward over ``rows`` denoising rows against ``rows``
    batch-1 forwards (bench/batchforward.py). Decoding ``rows`` requests together cannot be faster
    than that ratio, before admissions and the decoder's host work. A backend without the embedded
    engine has nothing to measure: ``report`` is None."""

    def __init__(self, model: str, rows: int):
        self.model, self.rows = model, rows
        self.prompt_tokens = (64, 128)
        self.samples: list[tuple[str, Any]] = []
        self.backend: Any = None
        self.engine: Any = None
        self.pair: Any = None
        self._opened = False

    def _open(self) -> Any:
        if not self._opened:
            from clovercode.backends.registry import open_backend
            from clovercode.ground.config import load_config

            self._opened = True
            cfg = load_config(None, os.environ, {"model": self.model}).with_overrides({"endpoint": ""}, "bench")
            self.backend = open_backend(cfg)
            self.engine = getattr(self.backend, "engine", None)
        return self.engine

    def sample(self, moment: str) -> None:
        """Time the two ways now (prompts admitted and prefilled at the first sample, then reused)."""
        from clovercode.bench.batchforward import BatchForwardPair

        engine = self._open()
        if engine is None:
            return
        if self.pair is None:
            self.pair = BatchForwardPair(engine.model, rows=self.rows, block=engine.block_size(),
                                         prompt_tokens=self.prompt_tokens)
        self.samples.append((moment, self.pair.time()))

    def close(self) -> None:
        self.pair = None
        if self.backend is not None:
            self.backend.close()
            self.backend = self.engine = None

    def report(self) -> dict[str, Any] | None:
        if not self.samples:
            return None
        figures = [_bound_figures(moment, timing) for moment, timing in self.samples]
        middle = sorted(figures, key=lambda f: f["bound"])[(len(figures) - 1) // 2]  # the median sample
        around = [f["bound"] for f in figures if f["moment"] in ("after queued", "after batched")]
        return {"rows": self.rows, "block": middle["block"], "prompt_tokens": list(self.prompt_tokens),
                **{k: middle[k] for k in ("batched_forward_ms", "one_row_forward_ms", "step_cost_vs_one_row", "bound")},
                "around_batched": around, "samples": figures}


def _bound_figures(moment: str, timing: Any) -> dict[str, Any]:
    return {"moment": moment, "block": timing.block, "batched_forward_ms": round(timing.batched_s * 1e3, 3),
            "one_row_forward_ms": round(timing.solo_s / timing.rows * 1e3, 3),
            "step_cost_vs_one_row": round(timing.batched_s / (timing.solo_s / timing.rows), 2),
            "bound": round(timing.speedup, 2)}


def forward_bound(model: str, rows: int, prompt_tokens: tuple[int, int]) -> dict[str, Any] | None:
    """One sample of the bound, now (None for a backend without the embedded engine)."""
    probe = BoundProbe(model, rows)
    probe.prompt_tokens = prompt_tokens
    try:
        probe.sample("now")
    finally:
        probe.close()
    return probe.report()
