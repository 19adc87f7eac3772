"""Memory statistics. On a CUDA backing flagos and native CUDA tensors share
the CUDA caching allocator, so these are CUDA's numbers for the device."""

from __future__ import annotations

import os

import torch

from torch_fl import _C
from torch_fl.flagos._device import _host_total_memory, _index, on_cuda


def memory_stats(device=None) -> dict[str, int]:
    idx = _index(device)
    if on_cuda():
        return torch.cuda.memory_stats(idx)
    s = _C._host_memory_stats(idx)
    current, peak = s["allocated"], s["peak"]
    # Host memory has no cache: reserved and active equal allocated.
    stats = {}
    for kind in ("allocated_bytes", "reserved_bytes", "active_bytes"):
        stats[f"{kind}.all.current"] = current
        stats[f"{kind}.all.peak"] = peak
    stats["allocation.all.current"] = s["allocations"] - s["frees"]
    stats["allocation.all.allocated"] = s["allocations"]
    stats["allocation.all.freed"] = s["frees"]
    stats["num_alloc_retries"] = 0
    stats["num_ooms"] = 0
    return dict(sorted(stats.items()))


def memory_allocated(device=None) -> int:
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None) -> int:
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None) -> int:
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None) -> int:
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None) -> None:
    idx = _index(device)
    if on_cuda():
        torch.cuda.init()  # CUDA's allocator rejects the call ('Invalid device argument') before its lazy init
        torch.cuda.reset_peak_memory_stats(idx)
    else:
        _C._host_reset_peak(idx)


def empty_cache() -> None:
    if on_cuda():
        torch.cuda.empty_cache()


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of the device."""
    idx = _index(device)
    if on_cuda():
        return torch.cuda.mem_get_info(idx)
    free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    return free, _host_total_memory()
