"""The engines that do the work: ProcessGroupNCCL on a CUDA backing, ProcessGroupGloo on host memory.

A flagos group holds gloo for CPU tensors (object collectives, CPU barriers) and, on a CUDA backing,
NCCL for the flagos tensors' CUDA memory; on host memory the one gloo serves both. Each gets a store
prefix of its own, so both rendezvous through the group's store without colliding.
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist
from torch.distributed import PrefixStore

from torch_fl._core import backing


def create(store, rank: int, size: int, timeout: timedelta, group_name: str, global_ranks: list[int], options):
    """{native device type: backend} for one group: {"cpu": gloo} or {"cpu": gloo, "cuda": nccl}."""
    from torch.distributed.distributed_c10d import ProcessGroupGloo

    gloo = ProcessGroupGloo(PrefixStore("gloo/", store), rank, size, timeout)
    gloo.options.global_ranks_in_group = global_ranks
    gloo.options.group_name = group_name
    engines = {"cpu": gloo}
    if backing() == "cuda":
        engines["cuda"] = _nccl(store, rank, size, timeout, group_name, global_ranks, options)
    for engine in engines.values():
        engine._set_sequence_number_for_group()
    return engines


def _nccl(store, rank, size, timeout, group_name, global_ranks, options):
    if not dist.is_nccl_available():
        raise RuntimeError(
            "flagos is backed by CUDA but this torch has no NCCL: torch.distributed on flagos runs NCCL on "
            "a CUDA backing. Install a CUDA build of torch with NCCL, or run flagos on host memory "
            "(FLAGOS_ACCELERATOR=cpu), where gloo does the work."
        )
    from torch.distributed.distributed_c10d import ProcessGroupNCCL

    if options is not None and not isinstance(options, ProcessGroupNCCL.Options):
        raise TypeError(
            f"pg_options for the flagos backend on a CUDA backing must be ProcessGroupNCCL.Options, got "
            f"{type(options).__name__}"
        )
    opts = options if options is not None else ProcessGroupNCCL.Options()
    if options is None:
        opts.is_high_priority_stream = False
    opts._timeout = timeout
    opts.global_ranks_in_group = global_ranks
    opts.group_name = group_name
    return ProcessGroupNCCL(PrefixStore("nccl/", store), rank, size, opts)


def backend_type(device_type: str):
    return dist.ProcessGroup.BackendType.NCCL if device_type == "cuda" else dist.ProcessGroup.BackendType.GLOO


def default_device_type() -> str:
    return "cuda" if backing() == "cuda" else "cpu"
