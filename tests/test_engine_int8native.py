"""The native int8 grouped GEMM (engine/int8native.py, engine/native/int8_grouped.c): built by the machine's
real compiler into a private cache, chosen for bf16 int8 experts on the CPU, equal to the reference on the
same int8 weights; without a compiler, or with a cache someone else could write, torch's kernel is kept."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from clovercode.engine import int8cpu, int8native  # noqa: E402


@pytest.fixture
def calls(monkeypatch):
    """The calls of torch's int8 kernel and of torch.mm (the widened path) that engine/int8cpu.py makes
    (counted by wrapping them: a TorchDispatchMode's first use costs seconds on a loaded CPU)."""
    seen: list[str] = []
    for name in ("_weight_int8pack_mm", "mm"):
        real = getattr(torch, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            seen.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(torch, name, counted)
    return seen


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A process with no library loaded yet and a cache of its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CLOVERCODE_INT8_KERNEL", raising=False)
    int8native.library.cache_clear()
    yield tmp_path
    int8native.library.cache_clear()


@pytest.fixture(scope="module")
def native():
    lib = int8native.library()
    if lib is None:
        pytest.skip("no C compiler or no AVX-512 here: the native kernel is not built (torch's kernel runs)")
    return lib


def _experts(counts, n=64, k=128, seed=0):
    generator = torch.Generator().manual_seed(seed)
    qdata = torch.randint(-127, 128, (len(counts), n, k), dtype=torch.int8, generator=generator)
    scale = (torch.rand(len(counts), n, generator=generator) * 0.01 + 1e-4).bfloat16()
    counts = torch.tensor(counts)
    x = torch.randn(int(counts.sum()), k, generator=generator).bfloat16()
    return x, qdata, scale, torch.arange(len(counts)), counts.cumsum(0)


def _reference(x, qdata, scale, hit, offsets):
    """Each group's rows times its expert's int8 weights and scales, in float64."""
    out, start = torch.zeros(x.shape[0], qdata.shape[1], dtype=torch.float64), 0
    for expert, end in zip(hit.tolist(), offsets.tolist()):
        out[start:end] = x[start:end].double() @ (qdata[expert].double() * scale[expert].double()[:, None]).t()
        start = end
    return out


def test_the_native_kernel_equals_the_reference_and_leaves_crowded_groups_to_torch(native, calls):
    # empty groups, 1-4 rows, one row past a tile of 4, and one group over NATIVE_ROWS (torch's widened matmul)
    counts = [1, 0, 2, 3, 4, 5, 0, int8cpu.NATIVE_ROWS, int8cpu.NATIVE_ROWS + 3, 1]
    x, qdata, scale, hit, offsets = _experts(counts)
    want = _reference(x, qdata, scale, hit, offsets)
    with torch.no_grad():
        got = int8cpu._grouped(x, qdata, scale, hit, offsets)
        assert calls == ["mm"]  # only the crowded group went through torch (a widened matmul)
        torch_path = int8cpu._grouped(x, qdata, scale, hit, offsets, native=False)
    assert got.dtype == torch.bfloat16 and got.shape == want.shape
    # bf16's own rounding of the result (8 bits): the same bound torch's kernel meets
    assert (got.double() - want).abs().max() <= 2 ** -8 * want.abs().max()
    assert (torch_path.double() - want).abs().max() <= 2 ** -8 * want.abs().max()
    assert "native" in int8cpu.kernel()


def test_an_expert_index_outside_the_weights_is_refused_before_the_kernel_reads(native):
    x, qdata, scale, hit, offsets = _experts([1, 2])
    out = torch.empty(x.shape[0], qdata.shape[1], dtype=torch.bfloat16)
    with pytest.raises(IndexError):
        int8native.grouped_mm(native, x, qdata, scale, torch.tensor([0, 2]), offsets, out, 16, 2)
    with pytest.raises(IndexError):
        int8native.grouped_mm(native, x, qdata, scale, hit, torch.tensor([1, 9]), out, 16, 2)
    with pytest.raises(ValueError):  # an output smaller than the rows it would write
        int8native.grouped_mm(native, x, qdata, scale, hit, offsets, out[:1], 16, 2)
    # shapes it does not take (in % 64): it says so and the caller keeps torch's kernel
    assert not int8native.takes(x[:, :96].contiguous(), qdata[:, :, :96].contiguous(), scale)


def test_without_a_compiler_torch_s_kernel_runs_and_the_result_is_the_same(fresh, monkeypatch, calls):
    monkeypatch.setenv("PATH", str(fresh / "no-compiler-here"))
    assert int8native.compiler(os.environ) is None and int8native.library() is None
    assert "_weight_int8pack_mm" in int8cpu.kernel()
    x, qdata, scale, hit, offsets = _experts([1, 2, 0, 3])
    with torch.no_grad():
        got = int8cpu._grouped(x, qdata, scale, hit, offsets)
    assert calls == ["_weight_int8pack_mm"] * 3  # one per hit expert with rows
    want = _reference(x, qdata, scale, hit, offsets)
    assert (got.double() - want).abs().max() <= 2 ** -8 * want.abs().max()
    assert not (fresh / "cache" / "clovercode" / "native").exists()


def test_the_torch_switch_keeps_torch_s_kernel(fresh, monkeypatch):
    monkeypatch.setenv("CLOVERCODE_INT8_KERNEL", "torch")
    assert int8native.library() is None


def test_a_library_someone_else_could_write_is_never_loaded(fresh):
    """The attack: a library another user can replace (a group- or world-writable cache, or file) would
    run as us. The build refuses to use either; a private rebuild is used."""
    if int8native.compiler(os.environ) is None:
        pytest.skip("no C compiler here")
    built = int8native.build(os.environ)
    assert built is not None and built.parent == fresh / "cache" / "clovercode" / "native"
    assert (built.stat().st_mode & 0o777) == 0o700 and (built.parent.stat().st_mode & 0o777) == 0o700
    os.chmod(built, 0o766)  # planted or loosened: another user may write it
    assert int8native.build(os.environ) is None
    os.chmod(built, 0o700)
    os.chmod(built.parent, 0o777)
    assert int8native.build(os.environ) is None
    os.chmod(built.parent, 0o700)
    assert int8native.build(os.environ) == built  # cached: no second compile


def test_a_compiler_the_project_directory_holds_is_never_run(fresh, tmp_path, monkeypatch):
    # A PATH with "." or an empty entry (the working directory) would have found a repository's own `cc`
    # and run it outside the sandbox: only absolute PATH entries outside the working directory count
    project = tmp_path / "project"
    project.mkdir()
    ran = project / "ran"
    for name in ("cc", "gcc", "clang"):
        fake = project / name
        fake.write_text(f"#!/bin/sh\ntouch {ran}\nexit 1\n")
        fake.chmod(0o755)
    monkeypatch.chdir(project)
    for path in (".", "", f"::{fresh / 'none'}", str(project), f"{project}/../project"):
        monkeypatch.setenv("PATH", path)
        assert int8native.compiler(os.environ) is None, path
        assert int8native.build(os.environ) is None
    assert not ran.exists()


def test_rows_with_a_wide_range_or_a_non_finite_value_keep_their_result(native):
    """Where the machine has AVX512-VNNI the kernel multiplies each row as 16-bit integers scaled to its
    largest value (error at most 2^-16 of it); a row with one large value among small ones still meets the
    bf16 bound, and a row holding an infinity or a NaN takes the float path, which carries it through as
    the reference does (inf or NaN out, never a finite number)."""
    x, qdata, scale, hit, offsets = _experts([3, 2, 1])
    x[0] = torch.randn(x.shape[1]).bfloat16() * 1e-3
    x[0, 5] = 300.0  # one value 10^5 times the rest
    x[3, 7] = float("inf")
    x[5, 1] = float("nan")
    out = torch.empty(x.shape[0], qdata.shape[1], dtype=torch.bfloat16)
    assert int8native.grouped_mm(native, x, qdata, scale, hit, offsets, out, 16, 2)
    want = _reference(x, qdata, scale, hit, offsets)
    finite = [0, 1, 2, 4]
    assert (out[finite].double() - want[finite]).abs().max() <= 2 ** -8 * want[finite].abs().max()
    # row 0 on its own: bf16's rounding of its result plus the 16-bit rows' bound (2^-16 of its largest value
    # times the weights' absolute row sums)
    weights = (qdata[0].double().abs() * scale[0].double()[:, None]).sum(dim=1)
    bound = 2 ** -8 * want[0].abs().max() + 2 ** -16 * x[0].double().abs().max() * weights.max()
    assert (out[0].double() - want[0]).abs().max() <= bound
    assert not torch.isfinite(out[3].float()).all() and torch.isnan(out[5].float()).all()


def test_a_changed_header_builds_a_new_library(fresh, tmp_path):
    """The kernels #include headers beside their source (native/fanout.h): the cached library's name
    hashes them too, so a changed header is never served by a library built from the old one."""
    from clovercode.engine import nativebuild

    if nativebuild.compiler(os.environ) is None:
        pytest.skip("no C compiler here")
    folder = tmp_path / "native"
    folder.mkdir()
    (folder / "part.h").write_text("static inline int part(void) { return 1; }\n")
    source = folder / "kernel.c"
    source.write_text('#include "part.h"\nint kernel(void) { return part(); }\n')
    first = nativebuild.build(source, os.environ)
    (folder / "part.h").write_text("static inline int part(void) { return 2; }\n")
    second = nativebuild.build(source, os.environ)
    assert first is not None and second is not None and first != second
    import ctypes

    assert ctypes.CDLL(str(second)).kernel() == 2


def test_a_forked_child_runs_the_kernel_on_workers_of_its_own(native):
    """The kernels keep their worker threads between calls (native/fanout.h); fork copies no threads, so a
    child's call must not wait on workers that are not there (the calling thread takes whatever job no
    worker takes, and the child starts workers of its own)."""
    import signal
    import time

    x, qdata, scale, hit, offsets = _experts([2, 3, 1, 4])
    want = _reference(x, qdata, scale, hit, offsets)
    out = torch.empty(x.shape[0], qdata.shape[1], dtype=torch.bfloat16)
    assert int8native.grouped_mm(native, x, qdata, scale, hit, offsets, out, 16, 2)  # the parent's workers start
    pid = os.fork()
    if pid == 0:  # the child: the same call, two threads
        try:
            again = torch.empty_like(out)
            ok = int8native.grouped_mm(native, x, qdata, scale, hit, offsets, again, 16, 2) and torch.equal(again, out)
        finally:
            os._exit(0 if ok else 3)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child's kernel call never returned")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert (out.double() - want).abs().max() <= 2 ** -8 * want.abs().max()


def test_the_kernels_run_on_torch_s_openmp_threads_with_the_same_bits(native):
    """Where torch runs on libgomp, the kernels' jobs run on torch's own OpenMP threads (native/fanout.h: a
    thread of their own beside torch's spinning ones shared a core with one); handed nothing, on the
    kernel's own pool. The same bits either way: a job's arithmetic does not depend on the thread."""
    import ctypes

    from clovercode.engine import nativebuild

    runtime = nativebuild.openmp_runtime()
    if runtime is None:
        pytest.skip("torch runs on another OpenMP runtime here: the kernels keep their own threads")
    assert all(runtime)
    x, qdata, scale, hit, offsets = _experts([2, 3, 1, 4, 0, 5])
    shared, own = (torch.empty(x.shape[0], qdata.shape[1], dtype=torch.bfloat16) for _ in range(2))
    setter = native.clover_share_openmp
    try:
        assert setter(*runtime) == 1
        assert int8native.grouped_mm(native, x, qdata, scale, hit, offsets, shared, 16, 2)
        assert setter(ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()) == 0  # back to its own pool
        assert int8native.grouped_mm(native, x, qdata, scale, hit, offsets, own, 16, 2)
    finally:
        setter(*runtime)
    assert torch.equal(shared, own)
