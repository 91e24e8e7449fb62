"""Free memory where the model runs, read with each platform's own call: the one seam every plan and
every "does it fit" check reads (engine/memory.py ``free_bytes``; tests patch it there).

* CUDA: the driver's free figure (``torch.cuda.mem_get_info``).
* MPS (Apple silicon): Metal's recommended working set less what the driver has allocated
  (``torch.mps.recommended_max_memory`` − ``driver_allocated_memory``), and never more than the host
  has available, since the memory is unified. Host RAM is not the figure: Metal refuses to map more
  than its working set, well under ``hw.memsize`` on a small Mac.
* the host (CPU): psutil's available memory (``MemAvailable`` on Linux, ``host_statistics64`` on
  macOS: the kernel's own reclaimable figure, not just the free pages); without psutil, the same
  numbers read from ``/proc/meminfo`` or ``vm_stat``. ``os.sysconf("SC_AVPHYS_PAGES")`` is no answer:
  macOS has no such name, and Linux's counts only free pages, not the page cache it would give back.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

MEMINFO = Path("/proc/meminfo")
_VM_PAGE = re.compile(r"page size of (\d+) bytes")
_VM_LINE = re.compile(r"^(Pages [a-z ]+):\s+(\d+)\.?\s*$", re.M)
# vm_stat's pages the kernel hands to a new allocation without swapping: free (speculative excluded),
# speculative (read ahead, dropped first) and inactive (the file cache psutil counts as available too).
VM_AVAILABLE = ("Pages free", "Pages speculative", "Pages inactive")


def device_free_bytes(device: str, torch: Any = None) -> int | None:
    """Free bytes on ``device`` ("cuda…", "mps", else the host); None when nothing says."""
    if device.startswith("cuda") or device == "mps":
        if torch is None:
            import torch
        if device.startswith("cuda"):
            return int(torch.cuda.mem_get_info(torch.device(device))[0])
        return mps_free_bytes(torch.mps.recommended_max_memory(), torch.mps.driver_allocated_memory(),
                              host_available_bytes())
    return host_available_bytes()


def mps_free_bytes(recommended: int, allocated: int, host: int | None) -> int:
    """What Metal will still map: its working set less its allocations, at most the host's available."""
    free = max(0, int(recommended) - int(allocated))
    return min(free, host) if host is not None else free


def host_available_bytes() -> int | None:
    """Memory the host can give a new allocation without swapping; None when no call says."""
    try:
        import psutil
    except ImportError:
        return _fallback_available()
    return int(psutil.virtual_memory().available)


def _fallback_available(platform: str = sys.platform) -> int | None:
    if platform == "darwin":
        try:
            out = subprocess.run(["vm_stat"], capture_output=True, text=True, timeout=5, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        return parse_vm_stat(out)
    try:
        return parse_meminfo(MEMINFO.read_text(encoding="ascii", errors="replace"))
    except OSError:
        return None


def parse_meminfo(text: str) -> int | None:
    """``MemAvailable`` of Linux's /proc/meminfo, in bytes (kernels before 3.14: free + cached)."""
    fields = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name.strip()] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    if "MemAvailable" in fields:
        return fields["MemAvailable"]
    if "MemFree" in fields:
        return fields["MemFree"] + fields.get("Cached", 0)
    return None


def parse_vm_stat(text: str) -> int | None:
    """Available bytes from macOS's ``vm_stat``: free, speculative and inactive pages × its page size."""
    page = _VM_PAGE.search(text)
    pages = {name: int(count) for name, count in _VM_LINE.findall(text)}
    if page is None or "Pages free" not in pages:
        return None
    return sum(pages.get(name, 0) for name in VM_AVAILABLE) * int(page.group(1))
