"""What each public torch.cuda name is on flagos: the one table docs/torch-flagos-api.md is made from.

A torch.cuda name is either implemented by torch.flagos (with the same
signature; FLAGOS_SPECIFIC says where its behaviour differs) or listed in
NOT_APPLICABLE_WHY or PLANNED_BY with the reason. missing() names the torch.cuda
names that are neither, so a torch release that adds names fails
tests/integration/test_flagos_api_coverage.py until they are classified.
scripts/gen_flagos_api.py renders the table.
"""

from __future__ import annotations

import inspect
import sys
import typing

import torch

SAME = "same"
SPECIFIC = "flagos-specific behaviour"
NOT_APPLICABLE = "not applicable"
PLANNED = "planned"
CATEGORIES = (SAME, SPECIFIC, PLANNED, NOT_APPLICABLE)

_HOST_NO_NVML = "CUDA backing: cuda:i's (NVML); host backing raises RuntimeError: host memory has no driver counters"
_HOST_PINNED = (
    "CUDA backing: CUDA's pinned host allocator, which Tensor.pin_memory() uses for flagos too; host backing "
    "raises RuntimeError: pinned memory there is plain host memory that the core does not count"
)
_HOST_NOT_CACHED = "host backing: equals the allocated figure, since host allocations are not cached"

# Implemented names whose behaviour differs from torch.cuda's, and how. On a CUDA
# backing flagos:i is cuda:i, so most differences are on host backing.
FLAGOS_SPECIFIC: dict[str, str] = {
    "AcceleratorError": (
        "torch.AcceleratorError itself; raised for a flagos device index out of range (torch.flagos's functions, "
        "factories, .to(), torch.accelerator.set_device_index, generators, streams), as CUDA does for an invalid "
        "ordinal"
    ),
    "OutOfMemoryError": (
        "torch.OutOfMemoryError itself; CUDA backing: raised by CUDA's allocator for flagos tensors too; host "
        "backing: raised when the flagos allocator's host allocation fails, counted in memory_stats' num_ooms"
    ),
    "Stream": (
        "returns a torch.Stream on the flagos device (isinstance(s, torch.flagos.Stream) holds); no .cuda_stream "
        "attribute: on a CUDA backing its stream_id is the CUDA stream's"
    ),
    "Event": (
        "returns a torch.Event on the flagos device; external=True raises NotImplementedError: torch.Event has no "
        "external flag (on a CUDA backing use torch.cuda.Event(external=True) on the capturing stream)"
    ),
    "CUDAGraph": (
        "a torch.cuda.CUDAGraph capturing flagos work (CUDA backing), plus captured_calls() (routed calls per "
        "operator and backend, counted once at capture) and replays; host backing raises RuntimeError"
    ),
    "graph": "torch.cuda.graph taking flagos streams (CUDA backing); host backing raises RuntimeError",
    "graph_pool_handle": "torch.cuda.graph_pool_handle (CUDA backing); host backing raises RuntimeError",
    "make_graphed_callables": (
        "torch.cuda.make_graphed_callables over flagos modules and tensors (CUDA backing); host backing raises "
        "RuntimeError"
    ),
    "graphs": "the module holding the graph API (CUDA backing only)",
    "ExternalStream": "CUDA backing: a flagos stream over the cudaStream_t; host backing raises RuntimeError",
    "get_stream_from_external": "CUDA backing: a flagos stream over the cudaStream_t; host backing raises RuntimeError",
    "is_current_stream_capturing": "CUDA backing: CUDA's answer for the current stream; host backing: False",
    "device_count": "host backing: FLAGOS_HOST_DEVICES virtual devices (default 1); CUDA backing: one per GPU",
    "get_device_properties": (
        "host backing: name, total_memory (host RAM), multi_processor_count (CPUs), major/minor 0, is_integrated"
    ),
    "get_device_name": "host backing: 'flagos host memory (<cpu>)'",
    "get_device_capability": "host backing: (0, 0)",
    "get_arch_list": "host backing: [] (no GPU code)",
    "get_gencode_flags": "host backing: '' (no GPU code)",
    "is_bf16_supported": "host backing: True (bfloat16 runs on the CPU kernels)",
    "is_tf32_supported": "host backing: False (CPUs have no TF32)",
    "has_magma": "CUDA backing: torch.cuda.has_magma; host backing: False",
    "can_device_access_peer": "host backing: True (virtual devices are one host memory)",
    "ipc_collect": "host backing: nothing to collect (no CUDA IPC)",
    "empty_cache": "host backing: nothing to release (host allocations are not cached)",
    "memory_stats": (
        "host backing: allocated/reserved/active bytes (current, peak; all three equal: no cache) and allocation "
        "counts (current, allocated, freed); no per-pool or segment keys"
    ),
    "memory_stats_as_nested_dict": "host backing: the host statistics of memory_stats, nested",
    "memory_summary": (
        "CUDA backing: cuda:i's table under a line naming flagos:i; host backing: a table of the host counters"
    ),
    "memory_reserved": _HOST_NOT_CACHED,
    "max_memory_reserved": _HOST_NOT_CACHED,
    "memory_cached": _HOST_NOT_CACHED + " (deprecated alias of memory_reserved, FutureWarning as torch.cuda's)",
    "max_memory_cached": _HOST_NOT_CACHED + " (deprecated alias of max_memory_reserved, FutureWarning)",
    "reset_accumulated_memory_stats": (
        "host backing: zeroes the allocated/freed allocation counts reported from then on (the core's counters run on)"
    ),
    "mem_get_info": "host backing: (available, total) host RAM",
    "device_memory_used": "CUDA backing: NVML's used memory of the GPU; host backing: used host RAM",
    "set_per_process_memory_fraction": (
        "host backing raises RuntimeError: host allocations have no per-process cap (use ulimit or cgroups)"
    ),
    "get_per_process_memory_fraction": "host backing: 1.0 (no cap)",
    "caching_allocator_alloc": (
        "host backing: a flagos byte tensor kept until caching_allocator_delete (counted by memory_stats); the "
        "stream argument takes a flagos stream or a raw pointer and is type-checked, host work being synchronous"
    ),
    "caching_allocator_delete": "host backing: frees a caching_allocator_alloc block; any other address raises",
    "caching_allocator_enable": "host backing: nothing to switch (host allocations are not cached)",
    "caching_allocator_disabled": (
        "host backing: nothing to switch (host allocations are not cached); CUDA backing on a torch whose "
        "torch.cuda lacks it (2.11) raises RuntimeError"
    ),
    "get_allocator_backend": "CUDA backing: CUDA's ('native' or 'cudaMallocAsync'); host backing: 'host'",
    "memory_snapshot": (
        "CUDA backing: the caching allocator's segments (flagos's included: one allocator); host backing raises "
        "RuntimeError: host allocations keep no segments (read memory_stats or memory_summary)"
    ),
    "host_memory_stats": _HOST_PINNED,
    "host_memory_stats_as_nested_dict": _HOST_PINNED,
    "reset_accumulated_host_memory_stats": _HOST_PINNED,
    "reset_peak_host_memory_stats": _HOST_PINNED,
    "utilization": _HOST_NO_NVML,
    "memory_usage": _HOST_NO_NVML,
    "temperature": _HOST_NO_NVML,
    "power_draw": _HOST_NO_NVML,
    "clock_rate": _HOST_NO_NVML,
    "list_gpu_processes": _HOST_NO_NVML,
    "set_sync_debug_mode": (
        "host backing: the mode is kept and never triggers: host kernels run synchronously, so nothing waits"
    ),
    "get_sync_debug_mode": "host backing: the mode last set (0 by default)",
    "default_generators": (
        "one per device, on flagos:i; CUDA backing: it draws from cuda:i's default generator (the same numbers); "
        "host backing: each virtual device has a CPU-algorithm generator of its own"
    ),
}

# torch.flagos names torch.cuda lacks, and what they are for.
FLAGOS_ONLY: dict[str, str] = {
    "get_amp_supported_dtype": "the dtypes torch.autocast('flagos') accepts (PyTorch asks a device module for them)",
}

_MEMPOOL = (
    "user memory pools (torch.cuda.MemPool) are not wrapped yet; graphs get private pools "
    "(torch.flagos.graph_pool_handle, CUDAGraph.pool)"
)
# torch.cuda names flagos does not have yet, and what to use meanwhile.
PLANNED_BY: dict[str, str] = {
    "MemPool": _MEMPOOL,
    "use_mem_pool": _MEMPOOL,
}

_LEGACY_TYPE = "legacy per-dtype CUDA type; flagos has none: use torch.empty(..., dtype=..., device='flagos')"
_SUBMODULE = "submodule of torch.cuda; its public functions are covered one by one at torch.flagos's top level"
_CUDA_RUNTIME = (
    "CUDA runtime binding (error codes, cudart); flagos reports errors as PyTorch exceptions, and on a CUDA "
    "backing torch.cuda's binding is the one to use"
)
_COMPAT_TABLE = "table of the CUDA build's supported compute capabilities; no flagos meaning"
_ALLOCATOR_SWAP = (
    "swaps torch.cuda's allocator; flagos's allocator is fixed by the core at import (the CUDA caching "
    "allocator on a CUDA backing, configured by PYTORCH_ALLOC_CONF; host memory otherwise)"
)
_GREEN = "CUDA green contexts partition a GPU's SMs through the CUDA driver; no flagos equivalent"

# torch.cuda names with no meaning on flagos, and why.
NOT_APPLICABLE_WHY: dict[str, str] = {
    **{
        f"{kind}{suffix}": _LEGACY_TYPE
        for kind in ("BFloat16", "Bool", "Byte", "Char", "Double", "Float", "Half", "Int", "Long", "Short")
        for suffix in ("Storage", "Tensor")
    },
    "ComplexDoubleStorage": _LEGACY_TYPE,
    "ComplexFloatStorage": _LEGACY_TYPE,
    "CUDAPluggableAllocator": _ALLOCATOR_SWAP,
    "change_current_allocator": _ALLOCATOR_SWAP,
    "CudaError": _CUDA_RUNTIME,
    "check_error": _CUDA_RUNTIME,
    "cudaStatus": _CUDA_RUNTIME,
    "cudart": _CUDA_RUNTIME,
    "DeferredCudaCallError": (
        "error of torch.cuda's queue of calls deferred to lazy init; flagos initialises at import and defers none"
    ),
    "GreenContext": _GREEN,
    "green_contexts": _GREEN,
    "gds": "GPUDirect Storage (cuFile) reads files into CUDA memory; no flagos equivalent",
    "current_blas_handle": (
        "raw cuBLAS handle for library interop; flagos routes each operator to a backend and exposes no library handle"
    ),
    "current_solver_handle": (
        "raw cuSOLVER handle for library interop; flagos routes each operator to a backend and exposes no "
        "library handle"
    ),
    "jiterator": "JIT-compiles CUDA C++ elementwise kernels; flagos's kernels are routed (FlagGems, native, CPU)",
    "tunable": "TunableOp picks cuBLAS/hipBLASLt GEMM algorithms; flagos's GEMMs are tuned by their routed backend",
    "nvtx": "NVTX ranges are per process, not per device: torch.cuda.nvtx works unchanged on a CUDA backing",
    "profiler": "cudaProfilerStart/Stop are per process: torch.cuda.profiler works unchanged on a CUDA backing",
    "nccl": "NCCL collectives on CUDA tensors; distributed flagos goes through torch.distributed, not torch.flagos",
    "sparse": "legacy per-dtype sparse CUDA types; use torch.sparse with device='flagos'",
    "amp": "deprecated torch.cuda.amp; use torch.amp (autocast, GradScaler) with device_type='flagos'",
    "memory": _SUBMODULE,
    "random": _SUBMODULE,
    "streams": _SUBMODULE,
    "DEVICE_REQUIREMENT": _COMPAT_TABLE,
    "PYTORCH_RELEASES_CODE_CC": _COMPAT_TABLE,
}


def _is_import(name: str, obj: object) -> bool:
    """Whether torch.cuda's `name` is something it imported for its own use (os, Any, lru_cache, ...)."""
    if inspect.ismodule(obj):
        return not obj.__name__.startswith("torch.cuda.")
    if getattr(typing, name, None) is obj:
        return True
    module = getattr(obj, "__module__", None) or ""
    from_stdlib = module.split(".")[0] in sys.stdlib_module_names
    return callable(obj) and (from_stdlib or module.startswith("torch._"))


def cuda_public_names() -> list[str]:
    """torch.cuda.__all__ plus its other public attributes that are not imports for its own use."""
    names = set(torch.cuda.__all__)
    names.update(n for n in dir(torch.cuda) if not n.startswith("_") and not _is_import(n, getattr(torch.cuda, n)))
    return sorted(names)


def cuda_import_names() -> list[str]:
    """torch.cuda's public-looking attributes that are imports for its own use (not counted)."""
    public = set(cuda_public_names())
    return sorted(n for n in dir(torch.cuda) if not n.startswith("_") and n not in public)


def classify(name: str) -> tuple[str, str]:
    """(category, note) of torch.cuda's `name` on flagos; category None where it is unclassified."""
    import torch_fl.flagos as flagos

    if hasattr(flagos, name):
        return (SPECIFIC, FLAGOS_SPECIFIC[name]) if name in FLAGOS_SPECIFIC else (SAME, "")
    if name in PLANNED_BY:
        return PLANNED, PLANNED_BY[name]
    if name in NOT_APPLICABLE_WHY:
        return NOT_APPLICABLE, NOT_APPLICABLE_WHY[name]
    return None, ""


def missing() -> list[str]:
    """torch.cuda public names that torch.flagos neither implements nor lists with a reason."""
    return [n for n in cuda_public_names() if classify(n)[0] is None]


def flagos_only_names() -> list[str]:
    """torch.flagos's public names that no torch.cuda has.

    A name of a newer torch.cuda that this torch lacks (torch 2.11 has no caching_allocator_disabled) is
    not one: its FLAGOS_SPECIFIC entry says what it does where torch.cuda lacks it.
    """
    import torch_fl.flagos as flagos

    public = set(cuda_public_names())
    return sorted(n for n in flagos.__all__ if n not in public and n not in FLAGOS_SPECIFIC)


def contradictions() -> list[str]:
    """Names the tables contradict: implemented yet listed as planned/not applicable, specific or flagos-only
    yet absent, listed twice, or flagos-only without a note."""
    import torch_fl.flagos as flagos

    both = [n for n in (*PLANNED_BY, *NOT_APPLICABLE_WHY) if hasattr(flagos, n)]
    absent = [n for n in (*FLAGOS_SPECIFIC, *FLAGOS_ONLY) if not hasattr(flagos, n)]
    listed_twice = set(PLANNED_BY) & set(NOT_APPLICABLE_WHY)
    unexplained = set(flagos_only_names()) - set(FLAGOS_ONLY)
    return sorted({*both, *absent, *listed_twice, *unexplained})


# torch.accelerator, PyTorch's generic device API (how accelerate, Trainer and Lightning reach a device
# they were not written for): every public name of the installed torch.accelerator, and how flagos answers
# it. On a CUDA backing the memory figures are the CUDA caching allocator's for the device (flagos and CUDA
# tensors share it), equal to torch.cuda's; on host backing they are the core's counts of flagos host
# allocations. tests/integrations/test_accelerator_api.py checks each and fails on an unlisted name.
_MEMORY = "the flagos allocator's figure (a c10::DeviceAllocator); equals torch.flagos's (and torch.cuda's on a GPU)"
ACCELERATOR: dict[str, str] = {
    "current_accelerator": "torch.device('flagos') on both backings: a registered PrivateUse1 device is torch's one",
    "is_available": "True once torch_fl is imported",
    "device_count": "torch.flagos.device_count(): the GPUs, or FLAGOS_HOST_DEVICES virtual devices on host memory",
    "current_device_index": "torch.flagos.current_device()",
    "current_device_idx": "deprecated alias of current_device_index",
    "set_device_index": "torch.flagos.set_device(i); out of range raises torch.AcceleratorError",
    "set_device_idx": "deprecated alias of set_device_index",
    "device_index": "context manager over torch.flagos's current device (None changes nothing)",
    "get_device_capability": (
        "every scalar type: flagos stores every dtype, and an operator whose backing kernel lacks one runs on "
        "the CPU (counted in routing.stats())"
    ),
    "current_stream": "the current flagos stream (a CUDA stream on a CUDA backing)",
    "set_stream": "makes a flagos stream current on its device",
    "synchronize": "torch.flagos.synchronize(i): waits for the device's work (host backing: work is synchronous)",
    "memory_allocated": _MEMORY,
    "max_memory_allocated": _MEMORY,
    "memory_reserved": _MEMORY + "; host backing: equals memory_allocated (host memory is not cached)",
    "max_memory_reserved": _MEMORY + "; host backing: equals max_memory_allocated",
    "memory_stats": (
        "the caching allocator's statistics (CUDA backing: torch.cuda.memory_stats's keys and values); host "
        "backing: the same keys, aggregate figures under 'all', num_ooms counting failed host allocations"
    ),
    "reset_peak_memory_stats": "resets the peaks memory_stats reports, as torch.cuda's",
    "reset_accumulated_memory_stats": "zeroes the allocated/freed totals and num_ooms, as torch.cuda's",
    "empty_cache": "CUDA backing: releases the caching allocator's unused blocks; host backing: nothing is cached",
    "empty_host_cache": "PyTorch's pinned host allocator cache, as for CUDA",
    "get_memory_info": "(free, total) bytes: cudaMemGetInfo on a CUDA backing; available and physical host memory",
    "Graph": "CUDA graph capture of flagos work on a CUDA backing (torch.flagos.CUDAGraph); host backing raises",
}


def accelerator_public_names() -> list[str]:
    """torch.accelerator's public API: its __all__ (its submodules and imports are not counted)."""
    return sorted(torch.accelerator.__all__)
