"""Statistics of pinned (page-locked) host memory, what Tensor.pin_memory() returns for flagos.

On a CUDA backing that is CUDA's pinned host allocator, shared with CUDA tensors.
"""

from __future__ import annotations

from typing import Any

from torch_fl.flagos._device import cuda_function, needs_cuda_backing, on_cuda

_HOST_WHY = (
    "pinned memory on host backing is ordinary host memory marked pinned, and torch has no statistics of it but "
    "CUDA's; torch.flagos.memory_stats() counts the flagos devices' memory"
)


def _cuda(name: str):
    if not on_cuda():
        raise needs_cuda_backing(name, _HOST_WHY)
    return cuda_function(name)


def host_memory_stats() -> dict[str, Any]:
    return _cuda("host_memory_stats")()


def host_memory_stats_as_nested_dict() -> dict[str, Any]:
    return _cuda("host_memory_stats_as_nested_dict")()


def reset_accumulated_host_memory_stats() -> None:
    _cuda("reset_accumulated_host_memory_stats")()


def reset_peak_host_memory_stats() -> None:
    _cuda("reset_peak_host_memory_stats")()
