"""Who generates next: a fair queue in front of one model, and the worker that drives it.

Fairness is per client (the API key's tenant when the server has keys, else the request's ``user``,
else its address): waiting requests are taken round-robin across clients, so one bot that queues
twenty requests does not starve the other seven; with ``max_per_client`` a client may also hold at
most that many of the queue's places, so it cannot fill the queue and have the others refused.
A backend with ``open_batch`` decodes up to ``max_batch`` requests together (fewer when its
``batch_slots`` says its memory plan holds fewer) and admits new ones between steps; the others wait
in the queue. Any other backend runs one request at a time. Every job gets exactly one terminal
item on its event queue (``DONE`` or ``Failed``), whether it finished, failed or was cancelled.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from clovercode.ground.messages import Message
from clovercode.backends.base import Finish, GenerationParams, ModelBackend, Usage
from clovercode.backends.batch import BatchingBackend, BatchSession
from clovercode.toolcalls.schemas import ToolSpec

DONE = "done"  # terminal item on a job's event queue


@dataclass(frozen=True)
class Failed:
    error: BaseException


class QueueFull(Exception):
    pass


class ServerStopping(Exception):
    pass


@dataclass(eq=False)  # identity matters: the queue removes this very job
class Job:
    id: str
    messages: Sequence[Message]
    tools: Sequence[ToolSpec]
    params: GenerationParams
    client: str
    events: "queue.SimpleQueue[Any]" = field(default_factory=queue.SimpleQueue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    enqueued: float = field(default_factory=time.monotonic)
    started: float | None = None

    def cancel(self) -> None:
        self.cancelled.set()


class FairQueue:
    """Jobs waiting for the model, one lane per client, taken round-robin across lanes; at most
    ``limit`` in all and (when given) ``per_client`` in one lane."""

    def __init__(self, limit: int, per_client: int = 0):
        self.limit = limit
        self.per_client = per_client
        self._lanes: OrderedDict[str, deque[Job]] = OrderedDict()
        self._size = 0
        self._cond = threading.Condition()

    def __len__(self) -> int:
        return self._size

    def put(self, job: Job) -> None:
        with self._cond:
            if self._size >= self.limit:
                raise QueueFull(f"{self._size} requests are already waiting (serve.max_queue = {self.limit})")
            waiting = len(self._lanes.get(job.client, ()))
            if self.per_client and waiting >= self.per_client:
                raise QueueFull(f"{waiting} of your requests are already waiting, your share of the queue "
                                f"(serve.max_queue_per_key = {self.per_client})")
            self._lanes.setdefault(job.client, deque()).append(job)
            self._size += 1
            self._cond.notify()

    def take(self, count: int, timeout: float = 0.0) -> list[Job]:
        """Up to ``count`` jobs, one per client in turn; waits up to ``timeout`` s when empty."""
        with self._cond:
            if not self._size and timeout > 0:
                self._cond.wait(timeout)
            out: list[Job] = []
            while self._size and len(out) < count:
                client, lane = next(iter(self._lanes.items()))
                out.append(lane.popleft())
                self._size -= 1
                if lane:
                    self._lanes.move_to_end(client)
                else:
                    del self._lanes[client]
            return out

    def remove(self, job: Job) -> bool:
        """Take ``job`` out if it is still waiting; False when a worker already has it."""
        with self._cond:
            lane = self._lanes.get(job.client)
            if lane is None or not any(j is job for j in lane):
                return False
            lane.remove(job)
            self._size -= 1
            if not lane:
                del self._lanes[job.client]
            return True

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


@dataclass
class Stats:
    submitted: int = 0
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    rejected: int = 0
    steps: int = 0  # batched decoding steps
    rows: int = 0  # requests advanced, summed over steps (rows / steps = mean batch size)
    # The per-pass timeline, seconds summed over steps: admissions (prefills), the whole step, the
    # session's forward and grammar work within it (timeline()), and handing events to the handlers.
    admit_s: float = 0.0
    step_s: float = 0.0
    forward_s: float = 0.0
    grammar_s: float = 0.0
    deliver_s: float = 0.0
    # Prompt prefills, seconds summed, in either loop: a batched session's admissions (its timeline's
    # prefill_s) or, for a request decoded alone, the prefill its final usage reports. What batching
    # gains on a prefill is far less than on a step: bench serve bounds the gain with it.
    prefill_s: float = 0.0
    alone_passes: int = 0  # forward passes after prefill of the requests decoded alone (their final usage)
    started: int = 0  # requests the model took from the queue
    queue_s: float = 0.0  # seconds they waited there first, summed (a client's turnaround shows here)


class Scheduler:
    def __init__(self, backend: ModelBackend, *, max_batch: int = 8, max_queue: int = 64,
                 max_queue_per_client: int = 0, log: Callable[[str], None] | None = None):
        self.backend = backend
        self.batching = max_batch > 1 and isinstance(backend, BatchingBackend)
        self.max_batch = max_batch if self.batching else 1
        slots = getattr(backend, "batch_slots", None)
        if self.batching and slots is not None:
            # the memory plan's slots (engine/memplan.py): a request past them waits in the queue,
            # never runs the device out of memory
            self.max_batch = max(1, min(self.max_batch, int(slots(self.max_batch))))
        self.queue = FairQueue(max_queue, max_queue_per_client)
        self.stats = Stats()
        self.active = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._forget = threading.Event()  # drop the kept prompts at the loop's next turn
        self._forgotten = threading.Event()
        self._forget_scope: str | None = None
        self._log = log or (lambda line: None)
        self._thread: threading.Thread | None = None
        self._model_thread: threading.Thread | None = None  # the thread in run()
        self._in_model = False  # that thread is inside a backend call (a prefill, a step)

    def start(self) -> None:
        """Drive the model from a new thread (tests, embedders). ``clovercode serve`` calls ``run`` on
        the thread that loaded the model instead (see ``run``)."""
        self._thread = threading.Thread(target=self.run, name="clovercode-serve-worker", daemon=True)
        self._thread.start()

    def run(self) -> None:
        """Drive the model on the calling thread until ``request_stop``. On CPU this should be the
        thread that loaded the model: torch's OpenMP intra-op pool belongs to the thread that first
        ran an op, a second thread gets a pool of its own, and with more pool threads than cores
        libgomp stops spinning between ops, which made every decoding step of a small model about
        twice as slow (docs/endpoint.md, "One model thread")."""
        self._model_thread = threading.current_thread()
        (self._batch_loop if self.batching else self._serial_loop)()

    def interrupt(self) -> None:
        """``request_stop`` for a signal handler (SIGTERM, SIGINT), which Python runs on the main
        thread, the model thread in ``clovercode serve``: a backend call in progress there (a prefill
        can take minutes on a CPU host) is left at once by raising ServerStopping into it; the jobs
        it served fail with that error, and ``run`` returns."""
        self.request_stop()
        if self._in_model and threading.current_thread() is self._model_thread:
            raise ServerStopping("the server is shutting down")

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def request_stop(self) -> None:
        """Ask the worker to stop after its current step (safe from a signal handler)."""
        self._stop.set()
        self.queue.wake()

    def forget_prompts(self, timeout: float = 30.0, scope: str | None = None) -> bool:
        """Have the model loop drop the prompts the backend keeps for reuse, between two steps (the
        loop is the only thread that touches them): all, or those whose cache scope starts with
        ``scope``; → whether it did within ``timeout`` seconds."""
        self._forgotten.clear()
        self._forget_scope = scope
        self._forget.set()
        self.queue.wake()
        return self._forgotten.wait(timeout)

    def _forget_if_asked(self, session: Any = None) -> None:
        if not self._forget.is_set():
            return
        self._forget.clear()
        scope = self._forget_scope
        for owner in (self.backend, session):
            forget = getattr(owner, "forget_prompts", None)
            if forget is not None:
                forget() if scope is None else forget(scope=scope)
        self._forgotten.set()

    def stop(self, timeout: float = 10.0) -> None:
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout)
        for job in self.queue.take(len(self.queue) + 1):
            self._finish(job, error=ServerStopping("the server is shutting down"))

    def submit(self, job: Job) -> None:
        if self._stop.is_set():
            raise ServerStopping("the server is shutting down")
        try:
            self.queue.put(job)
        except QueueFull:
            with self._lock:
                self.stats.rejected += 1
            raise
        with self._lock:
            self.stats.submitted += 1

    def cancel(self, job: Job) -> None:
        """Stop ``job``: a waiting one leaves the queue now (freeing its place), a running one
        stops at the model's next step, a finished one is unaffected."""
        job.cancel()
        if self.queue.remove(job):
            self._finish(job, cancelled=True)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            s = self.stats
            return {"queued": len(self.queue), "active": self.active, "max_batch": self.max_batch,
                    "submitted": s.submitted, "completed": s.completed, "cancelled": s.cancelled,
                    "failed": s.failed, "rejected": s.rejected, "batch_steps": s.steps, "batch_rows": s.rows,
                    "mean_batch": round(s.rows / s.steps, 3) if s.steps else None,
                    "timeline_s": {"admit": round(s.admit_s, 6), "step": round(s.step_s, 6),
                                   "forward": round(s.forward_s, 6), "grammar": round(s.grammar_s, 6),
                                   "deliver": round(s.deliver_s, 6), "prefill": round(s.prefill_s, 6)},
                    "started": s.started, "queue_wait_s": round(s.queue_s, 6), "alone_passes": s.alone_passes}

    # ---- workers ----------------------------------------------------------------------------

    def _serial_loop(self) -> None:
        while not self._stop.is_set():
            self._forget_if_asked()
            for job in self.queue.take(1, timeout=0.2):
                self._run_one(job)

    def _run_one(self, job: Job) -> None:
        if job.cancelled.is_set():
            self._finish(job, cancelled=True)
            return
        self._started(job)
        error: BaseException | None = None
        cancelled = False
        stream = None
        try:
            self._in_model = True
            stream = iter(self.backend.generate(job.messages, job.tools, job.params))
            for event in stream:
                if self._stop.is_set():
                    error = ServerStopping("the server is shutting down")
                    break
                if job.cancelled.is_set():
                    cancelled = True
                    break
                job.events.put(event)
                if isinstance(event, Usage) and event.extra and "prefill_s" in event.extra:  # the final usage
                    with self._lock:
                        self.stats.prefill_s += float(event.extra["prefill_s"])
                        self.stats.alone_passes += event.forwards or 0
                if isinstance(event, Finish):
                    break
        except Exception as exc:  # the backend failed: this job fails, the server goes on
            error = exc
        finally:
            self._in_model = False
            if stream is not None:
                _close_quietly(stream)
        self._finish(job, error=error, cancelled=cancelled)

    def _batch_loop(self) -> None:
        session: BatchSession | None = None
        active: dict[str, Job] = {}
        try:
            while not self._stop.is_set():
                if session is None:
                    session = self.backend.open_batch(self.max_batch)  # type: ignore[attr-defined]
                self._forget_if_asked(session)
                for key, job in list(active.items()):
                    if job.cancelled.is_set():
                        session.remove(key)
                        del active[key]
                        self._finish(job, cancelled=True)
                room = self.max_batch - len(active)
                joining = []
                for job in self.queue.take(room, timeout=0.0 if active else 0.2) if room else ():
                    if job.cancelled.is_set():
                        self._finish(job, cancelled=True)
                        continue
                    if constrained(job.params) and not getattr(self.backend, "batch_constraints", False):
                        # This backend's batch sessions take no grammars (the embedded one's do): the
                        # request takes the backend's own path, alone, while the batch waits.
                        self._run_one(job)
                        continue
                    self._started(job)
                    joining.append(job)
                began, before = time.perf_counter(), _timeline(session) if joining else {}
                failures = self._in_backend(_join, session, joining)
                admitted = time.perf_counter() - began
                if joining:
                    prefilled = _timeline(session).get("prefill_s", 0.0) - before.get("prefill_s", 0.0)
                    with self._lock:
                        self.stats.prefill_s += prefilled
                for job in joining:
                    if job.id in failures:
                        self._finish(job, error=failures[job.id])
                    else:
                        active[job.id] = job
                if not active:
                    continue
                rows = len(active)
                began, before = time.perf_counter(), _timeline(session)
                try:
                    events = self._in_backend(session.step)
                except Exception as exc:
                    self._log("batch step failed: " + "".join(traceback.format_exception_only(type(exc), exc)).strip())
                    for job in active.values():
                        self._finish(job, error=exc)
                    active.clear()
                    _close_quietly(session)
                    session = None
                    continue
                stepped, after = time.perf_counter() - began, _timeline(session)
                with self._lock:
                    self.stats.steps += 1
                    self.stats.rows += rows
                began = time.perf_counter()
                for key, event in events:
                    job = active.get(key)
                    if job is None:
                        continue
                    job.events.put(event)
                    if isinstance(event, Finish):
                        del active[key]
                        self._finish(job)
                with self._lock:
                    s = self.stats
                    s.admit_s, s.step_s, s.deliver_s = s.admit_s + admitted, s.step_s + stepped, \
                        s.deliver_s + time.perf_counter() - began
                    s.forward_s += after.get("forward_s", 0.0) - before.get("forward_s", 0.0)
                    s.grammar_s += after.get("grammar_s", 0.0) - before.get("grammar_s", 0.0)
        finally:
            for job in active.values():
                self._finish(job, error=ServerStopping("the server is shutting down"))
            if session is not None:
                _close_quietly(session)

    def _in_backend(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)``, marked as model work that ``interrupt`` may cut short."""
        self._in_model = True
        try:
            return call(*args)
        finally:
            self._in_model = False

    def _started(self, job: Job) -> None:
        job.started = time.monotonic()
        with self._lock:
            self.active += 1
            self.stats.started += 1
            self.stats.queue_s += job.started - job.enqueued

    def _finish(self, job: Job, *, error: BaseException | None = None, cancelled: bool = False) -> None:
        with self._lock:
            if job.started is not None:
                self.active -= 1
            if cancelled:
                self.stats.cancelled += 1
            elif error is not None:
                self.stats.failed += 1
            else:
                self.stats.completed += 1
        job.events.put(Failed(error) if error is not None else DONE)


def constrained(params: GenerationParams) -> bool:
    """Does this request ask for output a grammar must shape (tool_choice, a JSON Schema)?"""
    return params.tool_choice is not None or params.json_schema is not None


def _timeline(session: Any) -> dict[str, float]:
    timeline = getattr(session, "timeline", None)
    return timeline() if timeline is not None else {}


def _join(session: BatchSession, jobs: list[Job]) -> dict[str, BaseException]:
    """Add the waiting jobs to the batch together (so a session can prefill their prompts in one
    forward); → the ones that failed to join, with why."""
    if not jobs:
        return {}
    add_many = getattr(session, "add_many", None)
    if add_many is not None:
        try:
            return add_many([(job.id, job.messages, job.tools, job.params) for job in jobs])
        except Exception as exc:  # the session broke its contract: none of them joined
            return {job.id: exc for job in jobs}
    failures: dict[str, BaseException] = {}
    for job in jobs:
        try:
            session.add(job.id, job.messages, job.tools, job.params)
        except Exception as exc:
            failures[job.id] = exc
    return failures


def _close_quietly(thing: Any) -> None:
    try:
        thing.close()
    except Exception:
        pass
