"""Memory statistics. On a CUDA backing flagos and native CUDA tensors share
the CUDA caching allocator, so these are CUDA's numbers for the device. On
host backing they are the core's per-device counters of host allocations."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from torch_fl.flagos._device import Device, _index, cuda_function, needs_cuda_backing, on_cuda


def memory_stats(device: Device = None) -> dict[str, Any]:
    idx = _index(device)
    if on_cuda():
        return torch.cuda.memory_stats(idx)
    # The flagos allocator is a c10::DeviceAllocator: torch.accelerator asks it, in the core, for the
    # host backing's counts (reserved and active memory equal allocated memory: host memory has no cache).
    return dict(torch.accelerator.memory_stats(idx))


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """{'a.b.c': 1} -> {'a': {'b': {'c': 1}}}: the shape of torch.cuda.memory_stats_as_nested_dict."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def memory_stats_as_nested_dict(device: Device = None) -> dict[str, Any]:
    idx = _index(device)
    if on_cuda():
        return torch.cuda.memory_stats_as_nested_dict(idx)
    return nest(memory_stats(idx))


def memory_allocated(device: Device = None) -> int:
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device: Device = None) -> int:
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device: Device = None) -> int:
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: Device = None) -> int:
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def memory_cached(device: Device = None) -> int:
    """Deprecated; see memory_reserved."""
    warnings.warn(
        "`torch.flagos.memory_cached` has been renamed to `torch.flagos.memory_reserved`", FutureWarning, stacklevel=2
    )
    return memory_reserved(device)


def max_memory_cached(device: Device = None) -> int:
    """Deprecated; see max_memory_reserved."""
    warnings.warn(
        "`torch.flagos.max_memory_cached` has been renamed to `torch.flagos.max_memory_reserved`",
        FutureWarning,
        stacklevel=2,
    )
    return max_memory_reserved(device)


def reset_peak_memory_stats(device: Device = None) -> None:
    idx = _index(device)
    if on_cuda():
        torch.cuda.init()  # CUDA's allocator rejects the call ('Invalid device argument') before its lazy init
        torch.cuda.reset_peak_memory_stats(idx)
    else:
        torch.accelerator.reset_peak_memory_stats(idx)


def reset_max_memory_allocated(device: Device = None) -> None:
    """Resets *all* peak statistics, as torch.cuda's does (it calls reset_peak_memory_stats)."""
    warnings.warn(
        "torch.flagos.reset_max_memory_allocated now calls torch.flagos.reset_peak_memory_stats, "
        "which resets /all/ peak memory stats.",
        FutureWarning,
        stacklevel=2,
    )
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: Device = None) -> None:
    """Resets *all* peak statistics, as torch.cuda's does (it calls reset_peak_memory_stats)."""
    warnings.warn(
        "torch.flagos.reset_max_memory_cached now calls torch.flagos.reset_peak_memory_stats, "
        "which resets /all/ peak memory stats.",
        FutureWarning,
        stacklevel=2,
    )
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: Device = None) -> None:
    """Zeroes the "allocated"/"freed" totals (and num_alloc_retries/num_ooms) of memory_stats."""
    idx = _index(device)
    if on_cuda():
        torch.cuda.init()  # as for reset_peak_memory_stats
        torch.cuda.reset_accumulated_memory_stats(idx)
    else:
        torch.accelerator.reset_accumulated_memory_stats(idx)


def empty_cache() -> None:
    if on_cuda():
        torch.cuda.empty_cache()


def mem_get_info(device: Device = None) -> tuple[int, int]:
    """(free, total) bytes of the device."""
    idx = _index(device)
    if on_cuda():
        return torch.cuda.mem_get_info(idx)
    return torch.accelerator.get_memory_info(idx)


def set_per_process_memory_fraction(fraction, device: Device = None) -> None:
    """Caps this process's allocations on the device at fraction * total memory (CUDA backing)."""
    idx = _index(device)
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    if not on_cuda():
        raise needs_cuda_backing(
            "set_per_process_memory_fraction",
            "the host backing allocates each tensor from host memory with no per-process cap to set; "
            "limit the process's memory with the operating system (ulimit -v, cgroups) instead",
        )
    torch.cuda.set_per_process_memory_fraction(fraction, idx)


def get_per_process_memory_fraction(device: Device = None) -> float:
    """The cap set by set_per_process_memory_fraction; 1.0 (all of it) on host backing, which has no cap."""
    idx = _index(device)
    if on_cuda():
        return cuda_function("get_per_process_memory_fraction")(idx)
    return 1.0
