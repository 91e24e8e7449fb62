"""Free memory read with each platform's own call (engine/hostmemory.py): Metal's working set on MPS,
the kernel's available figure on the host (psutil; ``vm_stat`` on macOS or /proc/meminfo without it),
parsed from canned outputs of the real tools. ``os.sysconf("SC_AVPHYS_PAGES")``, read before, does not
exist on macOS (the plan then assumed 1 TiB free) and counts only free pages on Linux."""

from __future__ import annotations

import os
import stat
from types import SimpleNamespace

from clovercode.engine import hostmemory, memory

VM_STAT = """Mach Virtual Memory Statistics: (page size of 16384 bytes)
Pages free:                                5000.
Pages active:                            400000.
Pages inactive:                          300000.
Pages speculative:                         2000.
Pages throttled:                              0.
Pages wired down:                        150000.
Pages purgeable:                           1000.
"Translation faults":                 123456789.
Pages copy-on-write:                    3456789.
Pages zero filled:                     98765432.
Pages reactivated:                       123456.
Pages purged:                             12345.
File-backed pages:                       250000.
Anonymous pages:                         450000.
Pages stored in compressor:              200000.
Pages occupied by compressor:             60000.
Decompressions:                          100000.
Compressions:                            200000.
Pageins:                                 300000.
Pageouts:                                  1000.
Swapins:                                      0.
Swapouts:                                     0.
"""
MEMINFO = """MemTotal:       24576000 kB
MemFree:          512000 kB
MemAvailable:   16000000 kB
Buffers:          100000 kB
Cached:          9000000 kB
"""


def test_vm_stat_counts_free_speculative_and_inactive_pages_at_its_page_size():
    assert hostmemory.parse_vm_stat(VM_STAT) == (5000 + 2000 + 300000) * 16384
    intel = VM_STAT.replace("16384", "4096")  # Intel Macs have 4 KiB pages
    assert hostmemory.parse_vm_stat(intel) == (5000 + 2000 + 300000) * 4096
    assert hostmemory.parse_vm_stat("vm_stat: command failed") is None


def test_meminfo_reads_memavailable_and_free_plus_cached_on_old_kernels():
    assert hostmemory.parse_meminfo(MEMINFO) == 16000000 * 1024
    old = "\n".join(line for line in MEMINFO.splitlines() if not line.startswith("MemAvailable"))
    assert hostmemory.parse_meminfo(old) == (512000 + 9000000) * 1024
    assert hostmemory.parse_meminfo("garbage\n") is None


def test_mps_is_metals_working_set_less_its_allocations_and_at_most_what_the_host_has():
    gib = 2 ** 30
    fake = SimpleNamespace(mps=SimpleNamespace(recommended_max_memory=lambda: 21 * gib,
                                               driver_allocated_memory=lambda: 5 * gib))
    original = hostmemory.host_available_bytes
    try:
        hostmemory.host_available_bytes = lambda: 30 * gib
        assert hostmemory.device_free_bytes("mps", fake) == 16 * gib  # a 32 GB Mac: not host RAM
        hostmemory.host_available_bytes = lambda: 10 * gib
        assert hostmemory.device_free_bytes("mps", fake) == 10 * gib  # unified memory: the host bounds it
    finally:
        hostmemory.host_available_bytes = original
    assert hostmemory.mps_free_bytes(4 * gib, 6 * gib, None) == 0


def test_without_psutil_macos_runs_the_real_vm_stat_on_path(tmp_path, monkeypatch):
    tool = tmp_path / "vm_stat"  # the canned output, from an executable found on PATH as macOS's is
    tool.write_text("#!/bin/sh\ncat <<'EOF'\n" + VM_STAT + "EOF\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert hostmemory._fallback_available("darwin") == (5000 + 2000 + 300000) * 16384
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(MEMINFO)
    monkeypatch.setattr(hostmemory, "MEMINFO", meminfo)
    assert hostmemory._fallback_available("linux") == 16000000 * 1024


def test_the_host_figure_is_the_kernels_available_memory_not_only_free_pages():
    import psutil

    free = memory.free_bytes("cpu")
    assert free is not None and abs(free - psutil.virtual_memory().available) < 2 ** 30
