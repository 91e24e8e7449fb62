"""Graphs for batched serving (engine/batchgraphs.py, engine/capture.py), on the CPU through the capture
seam: a stand-in records a step and replays it eagerly into the same output buffer, so bucket
selection, padding rows, the in-graph mask, the warm-up count and the restore after a failed capture
are all exercised against the eager slot denoiser. The CUDA calls themselves need a GPU."""

import contextlib

import pytest
import torch

from clovercode.engine import batchdenoiser, capture
from clovercode.engine.batchdenoiser import SlotBatchDenoiser
from clovercode.engine.batchgraphs import GraphedBatch
from clovercode.engine.batchseam import Row
from tinymodels import MASK_ID, tiny_hybrid, tiny_llama


class FakeGraphs:
    """capture.CudaGraphs on the CPU: warm-ups counted, a recording that replays the pass eagerly
    into the output it first returned (what a CUDA graph does with its static output)."""

    def __init__(self, fail_at_record=False):
        self.fail_at_record = fail_at_record
        self.warmups = 0
        self.in_warmup = False
        self.replaying = False

    @contextlib.contextmanager
    def side_stream(self):
        self.in_warmup = True
        try:
            yield
        finally:
            self.in_warmup = False

    def record(self, run):
        out = run()
        if self.fail_at_record:
            raise RuntimeError("operation not permitted when stream is capturing")
        return FakeGraph(self, run, out), out

    def synchronize(self):
        pass


class FakeGraph:
    def __init__(self, backend, run, out):
        self.backend, self.run, self.out = backend, run, out

    def replay(self):
        self.backend.replaying = True
        try:
            self.out.copy_(self.run())
        finally:
            self.backend.replaying = False


def test_buckets_and_spans():
    assert capture.buckets(8) == [1, 2, 4, 8] and capture.buckets(6) == [1, 2, 4, 6] and capture.buckets(1) == [1]
    assert [capture.bucket_for(n, 8) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    assert capture.bucket_for(5, 6) == 6
    with pytest.raises(ValueError):
        capture.bucket_for(9, 8)
    assert capture.span_for(100, 4096) == 256 and capture.span_for(300, 4096) == 512
    assert capture.span_for(3000, 2048) == 3000 and capture.span_for(1500, 1024 + 512) == 1536


def test_capture_warms_up_twice_and_restores_after_each_pass_and_on_failure():
    events = []
    backend = FakeGraphs()
    graph, out = capture.capture(lambda: events.append("run") or torch.ones(1), lambda: events.append("save") or 1,
                                 lambda snap: events.append("restore"), backend)
    assert events == ["save", "run", "restore", "run", "restore", "run", "restore"] and capture.WARMUPS == 2
    events.clear()
    with pytest.raises(RuntimeError):
        capture.capture(lambda: events.append("run") or torch.ones(1), lambda: 1, lambda snap: events.append("restore"),
                        FakeGraphs(fail_at_record=True))
    assert events[-1] == "restore"


PROMPTS = [list(range(3, 3 + n)) for n in (9, 30, 17)]


def pair(model, backend, capacity=4):
    eager, graphed = SlotBatchDenoiser(model, capacity), SlotBatchDenoiser(model, capacity)
    notes = []
    wrapped = GraphedBatch(graphed, graphs=True, note=notes.append, backend=backend)
    for prompt in PROMPTS:
        assert eager.admit(prompt)[0] == wrapped.admit(prompt)[0]
    return eager, wrapped, notes


def steps(count=6):
    for step in range(count):
        yield [Row(slot, torch.tensor([MASK_ID, 5 + step, MASK_ID, 7]), (step + slot) % 3 == 0) for slot in range(3)]


def test_graphed_steps_equal_the_eager_slot_forwards_with_padding_rows_and_reused_graphs():
    model = tiny_llama()
    backend = FakeGraphs()
    eager, graphed, notes = pair(model, backend)
    for rows in steps():
        want, got = eager.forward(rows), graphed.forward(rows)
        assert got.shape == want.shape == (3, 4, want.shape[-1])
        assert torch.allclose(got, want, rtol=0, atol=1e-10) and torch.equal(got.argmax(-1), want.argmax(-1))
        assert [eager.length(s) for s in range(3)] == [graphed.length(s) for s in range(3)]
    assert not notes and graphed.graph_error is None
    assert len(graphed.captured) == 1 and graphed.replays == 6  # 3 rows → the bucket of 4, one span
    assert next(iter(graphed.captured)) == (4, 4, 256)


def test_the_mask_is_built_on_the_device_in_the_pass_never_per_step_on_the_host(monkeypatch):
    model = tiny_llama()
    backend = FakeGraphs()
    host_builds = []
    real = batchdenoiser._block_masks
    monkeypatch.setattr(batchdenoiser, "_block_masks",
                        lambda step, dtype: (None if backend.replaying else host_builds.append(step)) or real(step, dtype))
    _, graphed, _ = pair(model, backend)
    host_builds.clear()  # the denoisers' own probes when they were built
    for rows in steps(5):
        graphed.forward(rows)
    assert len(host_builds) == capture.WARMUPS + 1  # the warm-ups and the recording; replays compute it in-graph


def test_a_capture_that_raises_leaves_the_slots_bit_identical_and_decoding_goes_on_eagerly():
    model = tiny_llama()
    eager, graphed, notes = pair(model, FakeGraphs(fail_at_record=True))
    before = [[b.clone() for b in layer.buffers] for layer in graphed.slots.layers]
    seen = []
    graphed.note = lambda text: seen.append((text, [[torch.equal(b, a) for b, a in zip(layer.buffers, saved)]
                                                      for layer, saved in zip(graphed.slots.layers, before)]))
    for rows in steps(3):
        assert torch.equal(graphed.forward(rows), eager.forward(rows))
    assert len(seen) == 1 and "skipped" in seen[0][0] and "operation not permitted" in seen[0][0]
    assert all(all(flags) for flags in seen[0][1])  # at the note, before the eager pass: every buffer as it was
    assert graphed.replays == 0 and not graphed.captured


def test_kept_positions_replay_and_equal_the_eager_ones():
    eager, graphed, _ = pair(tiny_llama(), FakeGraphs())
    rows = [Row(s, torch.tensor([5, 6, 7]), s == 1, keep=torch.tensor([False, s != 1, True])) for s in range(3)]
    want, got = eager.forward(rows), graphed.forward(rows)
    assert graphed.replays == 1
    for s in range(3):
        kept = rows[s].keep
        assert torch.allclose(got[s][kept], want[s][kept], rtol=0, atol=1e-10)


def test_requests_decoded_together_over_graphed_steps_equal_each_decoded_alone():
    from test_batch_decode import assert_same, solo, tiny_subject, together

    from clovercode.engine.stops import Stops
    from tinymodels import EOS_ID

    subject = tiny_subject(tiny_llama)
    wrappers = []

    def graphed(capacity, kind):
        wrappers.append(GraphedBatch(SlotBatchDenoiser(subject.model, capacity), graphs=True, backend=FakeGraphs()))
        return wrappers[-1]

    subject.batch_denoiser = graphed
    stops = Stops(frozenset({EOS_ID}))
    from dataclasses import replace

    plans = [subject.plan, replace(subject.plan, strategy="topk", top_k=2), subject.plan,
             replace(subject.plan, max_new_tokens=9)]
    jobs = {f"r{i}": (i // 2, subject.prompts[i], plans[i], stops, None) for i in range(4)}
    batched, widths = together(subject, jobs, 4)
    for key, (_, prompt, plan, _, _) in jobs.items():
        assert_same(solo(subject, prompt, plan, stops), batched[key], key)
    assert wrappers[0].replays > 0 and wrappers[0].graph_error is None and max(widths) > 1


def test_steps_that_are_not_fixed_shape_run_eagerly():
    backend = FakeGraphs()
    _, graphed, _ = pair(tiny_llama(), backend)
    graphed.forward([Row(0, torch.tensor([5, 6]))])  # not every live row
    assert graphed.replays == 0 and not graphed.captured
    hybrid = SlotBatchDenoiser(tiny_hybrid(), 2)
    wrapped = GraphedBatch(hybrid, graphs=True, backend=backend)
    slot, _ = wrapped.admit([3, 4, 5])
    wrapped.forward([Row(slot, torch.tensor([5, 6]))])  # Gated DeltaNet state: eager
    assert wrapped.replays == 0


# -- the batch-1 static passes share the capture (engine/graphs.py) --------------------------------

def test_batch_one_graphs_decode_what_the_dynamic_cache_decodes():
    from clovercode.engine.decoder import DecodePlan, decode
    from clovercode.engine.denoiser import CachedDenoiser
    from clovercode.engine.graphs import StaticDenoiser
    from clovercode.engine.stops import Stops
    from tinymodels import EOS_ID

    model = tiny_hybrid()
    plan = DecodePlan(block_size=4, mask_id=MASK_ID, threshold=0.9, max_new_tokens=24)
    expected = decode(CachedDenoiser(model), list(range(3, 30)), plan, str, Stops(frozenset({EOS_ID})))
    backend = FakeGraphs()
    static = StaticDenoiser(model, graphs=True, backend=backend)
    got = decode(static, list(range(3, 30)), plan, str, Stops(frozenset({EOS_ID})))
    assert got.tokens == expected.tokens and got.stats.forwards == expected.stats.forwards
    assert static.graph_error is None and static.passes.captured == 2  # a denoise graph and a commit graph


def test_a_failed_batch_one_capture_restores_the_static_cache_and_the_passes_go_on_eagerly():
    from clovercode.engine import cachestate
    from clovercode.engine.denoiser import CachedDenoiser
    from clovercode.engine.graphs import StaticDenoiser

    model = tiny_hybrid()
    notes = []
    static = StaticDenoiser(model, graphs=True, backend=FakeGraphs(fail_at_record=True), note=notes.append)
    state = static.prefill(list(range(3, 30)))
    before = [(k, t.clone()) for k, t in cachestate.state_tensors(static.passes.kv.cache)]
    at_note = []
    static.passes.note = lambda text: notes.append(text) or at_note.append(
        all(torch.equal(b, a) for (_, b), (_, a) in zip(before, cachestate.state_tensors(static.passes.kv.cache))))
    block = torch.full((4,), MASK_ID)
    got = static.denoise(state, block)
    reference = CachedDenoiser(model)
    assert torch.allclose(got, reference.denoise(reference.prefill(list(range(3, 30))), block), atol=1e-10)
    assert at_note == [True] and "CUDA graphs skipped" in notes[0] and "operation not permitted" in notes[0]
    assert static.graph_error and static.passes.captured == 0
    static.denoise(state, block)  # eager from now on: no second attempt, no second note
    assert len(notes) == 1


def test_graphs_recorded_on_buffers_that_grew_are_dropped_and_the_steps_still_agree():
    model = tiny_llama()
    backend = FakeGraphs()
    eager, graphed = SlotBatchDenoiser(model, 2), SlotBatchDenoiser(model, 2)
    wrapped = GraphedBatch(graphed, graphs=True, backend=backend)
    for prompt in ([3 + i % 80 for i in range(250)], [5, 6, 7]):
        eager.admit(prompt)
        wrapped.admit(prompt)
    for step in range(4):  # commits carry the long row past the first buffer size
        rows = [Row(slot, torch.tensor([5 + step, 6, 7, 8]), True) for slot in range(2)]
        want, got = eager.forward(rows), wrapped.forward(rows)
        assert torch.allclose(got, want, rtol=0, atol=1e-10)
    assert wrapped.buffers() is graphed.slots.layers[0].buffers[0]
    assert wrapped.replays == 4 and eager.length(0) == graphed.length(0) == 266
