"""torch.flagos: device, stream, event, RNG, memory and AMP API, shaped like torch.cuda.

On a CUDA backing, flagos:i *is* cuda:i underneath: streams are CUDA streams,
memory comes from the CUDA caching allocator (one pool, one set of
statistics) and RNG state is CUDA's. On host backing the same API works over
host memory and virtual devices.
"""

from torch_fl.flagos._amp import get_amp_supported_dtype, is_bf16_supported
from torch_fl.flagos._device import (
    current_device,
    device,
    device_count,
    device_of,
    get_device_capability,
    get_device_name,
    get_device_properties,
    init,
    is_available,
    is_initialized,
    set_device,
    synchronize,
)
from torch_fl.flagos._memory import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    reset_peak_memory_stats,
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
from torch_fl.flagos._streams import Event, Stream, current_stream, default_stream, set_stream, stream


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
    raise AttributeError(f"module 'torch.flagos' has no attribute {name!r}")


__all__ = [
    "Event",
    "Stream",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
]
