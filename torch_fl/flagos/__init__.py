"""torch.flagos: device, stream, event, RNG, memory and AMP API, shaped like torch.cuda.

On a CUDA backing, flagos:i *is* cuda:i underneath: streams are CUDA streams,
memory comes from the CUDA caching allocator (one pool, one set of
statistics), RNG state is CUDA's and CUDA graphs capture flagos work
(graphs.py). On host backing the same API works over host memory and
virtual devices (no graphs). docs/torch-flagos-api.md lists every
torch.cuda name and what it is on flagos (torch_fl/flagos/_coverage.py).
"""

from torch import AcceleratorError, OutOfMemoryError

from torch_fl.flagos._allocator import (
    caching_allocator_alloc,
    caching_allocator_delete,
    caching_allocator_disabled,
    caching_allocator_enable,
    get_allocator_backend,
    memory_snapshot,
)
from torch_fl.flagos._amp import get_amp_supported_dtype, is_bf16_supported, is_tf32_supported
from torch_fl.flagos._device import (
    Device,
    can_device_access_peer,
    current_device,
    device,
    device_count,
    device_of,
    get_arch_list,
    get_device_capability,
    get_device_name,
    get_device_properties,
    get_gencode_flags,
    init,
    ipc_collect,
    is_available,
    is_initialized,
    set_device,
    synchronize,
)
from torch_fl.flagos._memory import (
    empty_cache,
    get_per_process_memory_fraction,
    max_memory_allocated,
    max_memory_cached,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_cached,
    memory_reserved,
    memory_stats,
    memory_stats_as_nested_dict,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_max_memory_cached,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)
from torch_fl.flagos._memory_summary import memory_summary
from torch_fl.flagos._monitoring import (
    clock_rate,
    device_memory_used,
    list_gpu_processes,
    memory_usage,
    power_draw,
    temperature,
    utilization,
)
from torch_fl.flagos._pinned_memory import (
    host_memory_stats,
    host_memory_stats_as_nested_dict,
    reset_accumulated_host_memory_stats,
    reset_peak_host_memory_stats,
)
from torch_fl.flagos._random import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from torch_fl.flagos._streams import (
    Event,
    ExternalStream,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    get_stream_from_external,
    is_current_stream_capturing,
    set_stream,
    stream,
)
from torch_fl.flagos._sync_debug import get_sync_debug_mode, set_sync_debug_mode
from torch_fl.flagos.graphs import CUDAGraph, graph, graph_pool_handle, make_graphed_callables

# Every flagos dtype has half-precision kernels (routed like any other op).
has_half = True


def _is_in_bad_fork() -> bool:
    """Whether this is a forked child that cannot use the device (CUDA's rule on a GPU backing)."""
    from torch_fl.flagos._device import on_cuda

    if on_cuda():
        import torch

        return torch.cuda._is_in_bad_fork()
    return False


def _lazy_init() -> None:
    """Called by PyTorch before the first flagos tensor is made."""
    init()


def __getattr__(name):
    # default_generators is computed on first use: on a CUDA backing it needs
    # CUDA initialised, which importing torch_fl should not force.
    if name == "default_generators":
        from torch_fl.flagos._random import default_generators

        return default_generators()
    if name == "_initialized":
        # What torch.cuda keeps as a flag, and what torch.utils.checkpoint reads to decide whether to save and
        # restore the device's RNG state around a recomputed forward (dropout masks): a value, not a callable.
        return is_initialized()
    if name == "has_magma":
        # flagos's linear algebra on a CUDA backing runs CUDA's kernels, MAGMA's where torch was built with it.
        import torch

        from torch_fl.flagos._device import on_cuda

        return on_cuda() and torch.cuda.has_magma
    raise AttributeError(f"module 'torch.flagos' has no attribute {name!r}")


__all__ = [
    "AcceleratorError",
    "CUDAGraph",
    "Device",
    "Event",
    "ExternalStream",
    "OutOfMemoryError",
    "Stream",
    "StreamContext",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "caching_allocator_disabled",
    "caching_allocator_enable",
    "can_device_access_peer",
    "clock_rate",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "device_memory_used",
    "device_of",
    "empty_cache",
    "get_allocator_backend",
    "get_amp_supported_dtype",
    "get_arch_list",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_gencode_flags",
    "get_per_process_memory_fraction",
    "get_rng_state",
    "get_rng_state_all",
    "get_stream_from_external",
    "get_sync_debug_mode",
    "graph",
    "graph_pool_handle",
    "has_half",
    "host_memory_stats",
    "host_memory_stats_as_nested_dict",
    "init",
    "initial_seed",
    "ipc_collect",
    "is_available",
    "is_bf16_supported",
    "is_current_stream_capturing",
    "is_initialized",
    "is_tf32_supported",
    "list_gpu_processes",
    "make_graphed_callables",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_cached",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_cached",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "memory_usage",
    "power_draw",
    "reset_accumulated_host_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "reset_peak_host_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "set_sync_debug_mode",
    "stream",
    "synchronize",
    "temperature",
    "utilization",
]
