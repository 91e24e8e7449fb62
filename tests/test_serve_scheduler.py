"""The fair queue and the worker that drives the model: ordering, cancellation, batching, failures."""

import pytest
from serve_helpers import EchoBackend, EchoBatchBackend, EchoJointBatchBackend, wait_for

from clovercode.ground.messages import Message
from clovercode.backends.base import ContextTooLong, Finish, GenerationParams, TextDelta, Usage
from clovercode.backends.scheduler import DONE, Failed, FairQueue, Job, QueueFull, Scheduler

PARAMS = GenerationParams()


def job(client: str, text: str, key: str | None = None) -> Job:
    return Job(key or f"{client}:{text}", [Message("user", text)], [], PARAMS, client)


def drain(j: Job, timeout: float = 10.0) -> tuple[str, object]:
    """The job's text and its terminal item."""
    text = ""
    while True:
        item = j.events.get(timeout=timeout)
        if item == DONE or isinstance(item, Failed):
            return text, item
        if isinstance(item, TextDelta):
            text += item.text


def answer(scheduler: Scheduler, count: int) -> None:
    """``count`` requests from as many clients, submitted together and each answered to its end."""
    jobs = [job(f"c{i}", f"hello {i}") for i in range(count)]
    for j in jobs:
        scheduler.submit(j)
    for j in jobs:
        assert drain(j)[1] == DONE


def test_fair_queue_takes_round_robin_across_clients():
    q = FairQueue(limit=10)
    for j in [job("a", "1"), job("a", "2"), job("a", "3"), job("b", "1"), job("c", "1"), job("b", "2")]:
        q.put(j)
    assert [j.id for j in q.take(10)] == ["a:1", "b:1", "c:1", "a:2", "b:2", "a:3"]
    assert len(q) == 0


def test_fair_queue_refuses_beyond_its_limit():
    q = FairQueue(limit=2)
    q.put(job("a", "1"))
    q.put(job("b", "1"))
    with pytest.raises(QueueFull, match="2 requests are already waiting"):
        q.put(job("c", "1"))
    assert len(q.take(1)) == 1
    q.put(job("c", "1"))


def test_serial_worker_answers_each_job_and_counts():
    scheduler = Scheduler(EchoBackend(), max_batch=8)
    assert not scheduler.batching
    scheduler.start()
    try:
        jobs = [job(f"c{i}", f"hello {i}") for i in range(4)]
        for j in jobs:
            scheduler.submit(j)
        assert [drain(j) for j in jobs] == [(f"echo: hello {i}", DONE) for i in range(4)]
        assert scheduler.snapshot()["completed"] == 4
    finally:
        scheduler.stop()


def test_cancelling_a_running_job_closes_the_backend_stream():
    backend = EchoBackend(delay=0.05)
    scheduler = Scheduler(backend)
    scheduler.start()
    try:
        j = job("a", "a long reply " * 20)
        scheduler.submit(j)
        assert isinstance(j.events.get(timeout=5), TextDelta)
        j.cancel()
        assert wait_for(lambda: backend.closed_early == 1)
        assert wait_for(lambda: scheduler.snapshot()["cancelled"] == 1)
        assert scheduler.snapshot()["active"] == 0
    finally:
        scheduler.stop()


def test_a_cancelled_queued_job_never_starts():
    backend = EchoBackend(delay=0.02)
    scheduler = Scheduler(backend)
    first, second = job("a", "x" * 30), job("b", "never")
    second.cancel()
    scheduler.submit(first)
    scheduler.submit(second)
    scheduler.start()
    try:
        assert drain(first)[1] == DONE
        assert drain(second) == ("", DONE)
        assert backend.started == 1
    finally:
        scheduler.stop()


def test_a_failing_request_fails_alone():
    scheduler = Scheduler(EchoBackend())
    scheduler.start()
    try:
        bad, good = job("a", "HUGE prompt"), job("b", "fine")
        scheduler.submit(bad)
        scheduler.submit(good)
        text, end = drain(bad)
        assert isinstance(end, Failed) and isinstance(end.error, ContextTooLong)
        assert drain(good) == ("echo: fine", DONE)
        assert scheduler.snapshot()["failed"] == 1
    finally:
        scheduler.stop()


def test_batching_worker_runs_requests_together_without_mixing_them():
    backend = EchoBatchBackend()
    scheduler = Scheduler(backend, max_batch=3)
    assert scheduler.batching
    jobs = [job(f"c{i}", f"message number {i}") for i in range(7)]
    for j in jobs:
        scheduler.submit(j)
    scheduler.start()
    try:
        assert [drain(j)[0] for j in jobs] == [f"echo: message number {i}" for i in range(7)]
        assert max(backend.widths) == 3  # never beyond max_batch, and actually batched
        snap = scheduler.snapshot()
        assert snap["completed"] == 7 and snap["mean_batch"] > 1.5
    finally:
        scheduler.stop()


def test_batching_cancel_frees_the_slot_and_add_errors_stay_local():
    backend = EchoBatchBackend(delay=0.01)
    scheduler = Scheduler(backend, max_batch=2)
    scheduler.start()
    try:
        long, huge, short = job("a", "z" * 200), job("b", "HUGE"), job("c", "short")
        for j in (long, huge, short):
            scheduler.submit(j)
        assert isinstance(drain(huge)[1].error, ContextTooLong)
        assert isinstance(long.events.get(timeout=5), TextDelta)
        long.cancel()
        assert wait_for(lambda: backend.removed == [long.id])
        assert drain(short) == ("echo: short", DONE)
    finally:
        scheduler.stop()


def test_requests_waiting_together_join_the_batch_in_one_call_and_a_failure_stays_local():
    backend = EchoJointBatchBackend(delay=0.01)
    scheduler = Scheduler(backend, max_batch=3)
    waiting = [job("a", "first"), job("b", "HUGE"), job("c", "third"), job("d", "fourth")]
    for j in waiting:
        scheduler.submit(j)
    scheduler.start()
    try:
        assert isinstance(drain(waiting[1])[1].error, ContextTooLong)
        assert [drain(j) for j in (waiting[0], waiting[2], waiting[3])] == [
            ("echo: first", DONE), ("echo: third", DONE), ("echo: fourth", DONE)]
        # the first three (max_batch) join in one call; the fourth when a slot is free
        assert backend.joined[0] == [j.id for j in waiting[:3]]
        assert [j.id for j in waiting[3:]] in backend.joined[1:]
        assert scheduler.snapshot()["failed"] == 1
    finally:
        scheduler.stop()


def test_a_crashing_batch_step_fails_its_requests_and_the_next_batch_works():
    backend = EchoBatchBackend()
    scheduler = Scheduler(backend, max_batch=4)
    crash = job("a", "CRASH now")
    scheduler.submit(crash)
    scheduler.start()
    try:
        end = drain(crash)[1]
        assert isinstance(end, Failed) and "crashed" in str(end.error)
        after = job("b", "after")
        scheduler.submit(after)
        assert drain(after) == ("echo: after", DONE)
        assert backend.sessions_closed == 1
    finally:
        scheduler.stop()


def test_stop_fails_waiting_jobs_and_refuses_new_ones():
    scheduler = Scheduler(EchoBackend())
    waiting = job("a", "never started")
    scheduler.submit(waiting)
    scheduler.stop()
    end = drain(waiting)[1]
    assert isinstance(end, Failed) and "shutting down" in str(end.error)
    with pytest.raises(Exception, match="shutting down"):
        scheduler.submit(job("b", "late"))


def test_finish_events_reach_the_job():
    scheduler = Scheduler(EchoBackend())
    scheduler.start()
    try:
        j = job("a", "hi")
        scheduler.submit(j)
        items = []
        while (item := j.events.get(timeout=5)) != DONE:
            items.append(item)
        assert items[-1] == Finish("stop")
    finally:
        scheduler.stop()


def test_cancelling_a_waiting_job_frees_its_place_at_once():
    scheduler = Scheduler(EchoBackend(), max_queue=1)  # not started: jobs wait
    waiting, next_one = job("a", "1"), job("b", "2")
    scheduler.submit(waiting)
    with pytest.raises(QueueFull):
        scheduler.submit(next_one)
    scheduler.cancel(waiting)
    assert drain(waiting) == ("", DONE)
    scheduler.submit(next_one)
    assert scheduler.snapshot()["cancelled"] == 1 and scheduler.snapshot()["queued"] == 1
    scheduler.stop()


def test_a_constrained_request_takes_the_unbatched_path_while_the_batch_waits():
    from dataclasses import replace

    backend = EchoBatchBackend()
    scheduler = Scheduler(backend, max_batch=4)
    assert scheduler.batching
    scheduler.start()
    try:
        free = [job("a", f"free {i}") for i in range(3)]
        held = Job("b:held", [Message("user", "held")], [], replace(PARAMS, tool_choice="required"), "b")
        for j in [*free, held]:
            scheduler.submit(j)
        assert drain(held)[0] == "echo: held" and backend.started == 1  # generate(), not the batch
        assert [drain(j)[0] for j in free] == [f"echo: free {i}" for i in range(3)]
    finally:
        scheduler.stop()


def test_the_snapshot_holds_the_per_pass_timeline():
    """Issue 48.5: admissions, the step, the session's forward and grammar work within it, and the
    hand-off to the handlers, summed over steps (bench serve prints them per pass)."""
    from serve_helpers import EchoBatchSession

    class Timed(EchoBatchSession):
        spent = prefilled = 0.0

        def step(self):
            Timed.spent += 0.001
            return super().step()

        def add(self, *args):
            Timed.prefilled += 0.002
            return super().add(*args)

        def timeline(self):
            return {"forward_s": Timed.spent, "grammar_s": Timed.spent / 10, "prefill_s": Timed.prefilled}

    class TimedBackend(EchoBatchBackend):
        def open_batch(self, max_batch):
            return Timed(self, max_batch)

    scheduler = Scheduler(TimedBackend(), max_batch=4)
    scheduler.start()
    try:
        answer(scheduler, 3)
        snap = scheduler.snapshot()
        timeline, steps = snap["timeline_s"], snap["batch_steps"]
        assert timeline["forward"] == pytest.approx(steps * 0.001, rel=0.01)
        assert timeline["grammar"] == pytest.approx(steps * 0.0001, rel=0.01)
        assert timeline["step"] > 0 and timeline["deliver"] > 0 and timeline["admit"] > 0
        assert timeline["prefill"] == pytest.approx(3 * 0.002)  # the admissions' prefills, summed
        # and how long requests waited in the queue before the model took them (all three at once here)
        assert snap["started"] == 3 and 0 < snap["queue_wait_s"] < 5
    finally:
        scheduler.stop()


def test_a_request_decoded_alone_counts_its_prefill():
    """bench serve bounds what batching can gain with the work decoded alone: the one-by-one mode's
    prefills and passes come from each request's final usage (the engine reports them there)."""
    class Prefilled(EchoBackend):
        def generate(self, messages, tools, params):
            for event in super().generate(messages, tools, params):
                if isinstance(event, Usage):
                    event = Usage(event.prompt_tokens, event.completion_tokens, forwards=7, extra={"prefill_s": 0.25})
                yield event

    scheduler = Scheduler(Prefilled(), max_batch=1)
    scheduler.start()
    try:
        answer(scheduler, 2)
        snap = scheduler.snapshot()
        assert snap["timeline_s"]["prefill"] == pytest.approx(0.5) and snap["alone_passes"] == 14
    finally:
        scheduler.stop()
