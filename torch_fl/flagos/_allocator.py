"""The allocator behind flagos memory: raw allocations, its switches and its snapshot.

On a CUDA backing flagos:i allocates from cuda:i's caching allocator, so these
act on (and report) that allocator, shared with CUDA tensors. On host backing
each allocation is a plain host allocation counted per virtual device.
"""

from __future__ import annotations

import contextlib

import torch

from torch_fl._core import DEVICE_NAME
from torch_fl.flagos._device import Device, _index, cuda_function, needs_cuda_backing, on_cuda
from torch_fl.flagos._streams import native_stream

# Host backing: caching_allocator_alloc's blocks are flagos byte tensors kept alive here until
# caching_allocator_delete, so they count in memory_stats like any flagos allocation.
_host_blocks: dict[int, torch.Tensor] = {}


def caching_allocator_alloc(size, device: Device = None, stream=None) -> int:
    """Allocates `size` bytes on the device and returns the address; free it with caching_allocator_delete.

    `stream` (a flagos stream, a raw CUDA stream pointer, or None for the current stream) is the stream
    the memory is used on; host work is synchronous, so host backing ignores it after checking its type.
    """
    idx = _index(device)
    if stream is not None and not isinstance(stream, int) and not _is_flagos_stream(stream):
        raise TypeError(
            "Invalid type for stream argument, must be a flagos stream (torch.flagos.Stream) or `int` "
            f"representing a pointer to an existing stream, got {type(stream).__name__}"
        )
    if on_cuda():
        cuda_stream = native_stream(stream) if _is_flagos_stream(stream) else stream
        return torch.cuda.caching_allocator_alloc(size, idx, cuda_stream)
    if size == 0:
        return 0  # as CUDA's: a null pointer, which caching_allocator_delete accepts
    block = torch.empty(size, dtype=torch.uint8, device=torch.device(DEVICE_NAME, idx))
    _host_blocks[block.data_ptr()] = block
    return block.data_ptr()


def caching_allocator_delete(mem_ptr) -> None:
    """Frees memory from caching_allocator_alloc."""
    if on_cuda():
        torch.cuda.caching_allocator_delete(mem_ptr)
        return
    if mem_ptr == 0:
        return
    if _host_blocks.pop(mem_ptr, None) is None:
        raise RuntimeError(
            f"invalid device pointer: {mem_ptr:#x} was not returned by torch.flagos.caching_allocator_alloc "
            "(or was freed already)"
        )


def _is_flagos_stream(stream) -> bool:
    return isinstance(stream, torch.Stream) and stream.device.type == DEVICE_NAME


def caching_allocator_enable(value: bool = True) -> None:
    """Turns CUDA's caching on or off (process-wide); host allocations are never cached, so host backing has
    nothing to switch."""
    if on_cuda():
        cuda_function("caching_allocator_enable")(value)


@contextlib.contextmanager
def caching_allocator_disabled():
    """Inside the block allocations bypass CUDA's cache; host allocations are never cached."""
    if on_cuda():
        with cuda_function("caching_allocator_disabled")():
            yield
    else:
        yield


def get_allocator_backend() -> str:
    """CUDA's allocator backend ("native" or "cudaMallocAsync", from PYTORCH_ALLOC_CONF); "host" on host backing."""
    return torch.cuda.get_allocator_backend() if on_cuda() else "host"


def memory_snapshot(mempool_id=None, include_traces=True):
    """The CUDA caching allocator's segments across all devices (flagos's included: it is one allocator)."""
    if not on_cuda():
        raise needs_cuda_backing(
            "memory_snapshot",
            "it lists the CUDA caching allocator's segments and blocks; the host backing allocates each tensor "
            "directly and keeps no segments: read torch.flagos.memory_stats() or memory_summary() instead",
        )
    if include_traces:
        return torch.cuda.memory_snapshot(mempool_id)
    return torch.cuda.memory_snapshot(mempool_id, include_traces=False)
