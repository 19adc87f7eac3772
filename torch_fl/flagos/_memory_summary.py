"""memory_summary: a human-readable table of a flagos device's memory statistics."""

from __future__ import annotations

import torch

from torch_fl.flagos._device import Device, _index, device_count, on_cuda
from torch_fl.flagos._memory import memory_stats

_WIDTH = 75


def _format_size(size: int) -> str:
    # torch.cuda.memory_summary's units: the largest prefix that keeps at least 768 of them.
    for prefix in ("B  ", "KiB", "MiB", "GiB", "TiB"):
        if size < 768 * 1024:
            return f"{size:6d} {prefix}"
        size //= 1024
    return f"{size:6d} PiB"


def _format_count(count: int) -> str:
    for prefix in (" ", "K"):
        if count < 750 * 1000:
            return f"{count:7d} {prefix} "
        count //= 1000
    return f"{count:7d} M "


def _cell(stats: dict, key: str, fmt) -> str:
    # The host allocator does not count every statistic CUDA's does (e.g. total bytes freed).
    return fmt(stats[key]) if key in stats else f"{'n/a':>10}"


def _host_summary(idx: int, stats: dict) -> str:
    rows = [
        ("allocated_bytes.all", "Allocated memory", _format_size),
        ("active_bytes.all", "Active memory", _format_size),
        ("reserved_bytes.all", "Reserved memory", _format_size),
        ("allocation.all", "Allocations", _format_count),
    ]
    lines = [
        "=" * _WIDTH,
        f"{'PyTorch flagos memory summary, device ID ' + str(idx):^{_WIDTH}}",
        f"{f'host memory: virtual device {idx} of {device_count()} (FLAGOS_HOST_DEVICES)':^{_WIDTH}}",
        f"{'reserved = active = allocated: host allocations are not cached':^{_WIDTH}}",
        "=" * _WIDTH,
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ",
    ]
    for key, name, fmt in rows:
        cells = [_cell(stats, f"{key}.{field}", fmt) for field in ("current", "peak", "allocated", "freed")]
        lines += ["-" * _WIDTH, f" {name:<21} | " + " | ".join(cells) + " "]
    lines.append("=" * _WIDTH)
    return "|" + "|\n|".join(line.ljust(_WIDTH) for line in lines) + "|\n"


def memory_summary(device: Device = None, abbreviated: bool = False) -> str:
    """A printable table of the device's memory statistics (see memory_stats).

    `abbreviated` drops CUDA's per-pool rows; host memory has no pools, so its table is always short.

    On a CUDA backing flagos:i allocates from cuda:i's caching allocator, so the
    table is CUDA's for that device under a line saying so.
    """
    idx = _index(device)
    if on_cuda():
        torch.cuda.init()
        header = f"flagos:{idx} memory is cuda:{idx}'s caching allocator (shared with CUDA tensors):\n"
        return header + torch.cuda.memory_summary(idx, abbreviated=abbreviated)
    return _host_summary(idx, memory_stats(idx))
