"""The "flagos" backend of torch.distributed, registered through Backend.register_backend.

Registered for the devices "cpu" and "flagos", and made the default backend of the flagos device, so
`init_process_group()` (no backend: PyTorch picks the accelerator's default), `init_process_group(
"flagos")` and `init_process_group("cpu:gloo,flagos:flagos")` all give flagos tensors a
FlagosProcessGroup.

PyTorch's own backends that can carry flagos tensors declare the flagos device too (as HPU declares
itself for "fake"): "gloo" always, "nccl" on a CUDA backing. So code written for CUDA,
`init_process_group("nccl")` or `("gloo")`, gets a group whose backend serves flagos tensors, and flagos's
kernels of the c10d:: operators run that backend on the tensors' native aliases
(torch_fl/csrc/route/collectives.cpp).
"""

from __future__ import annotations

import torch.distributed as dist

from torch_fl._core import DEVICE_NAME, backing
from torch_fl.distributed import checkpoint_staging
from torch_fl.distributed.process_group import BACKEND_NAME, FlagosProcessGroup

_registered = False


def _create(backend_opts, pg_options):
    """The creator PyTorch calls per group (extended API: DistributedBackendOptions, pg_options)."""
    return FlagosProcessGroup(
        backend_opts.store,
        backend_opts.group_rank,
        backend_opts.group_size,
        backend_opts.timeout,
        backend_opts.group_id,
        list(backend_opts.global_ranks_in_group),
        pg_options,
    )


def carriers() -> tuple[str, ...]:
    """PyTorch's backends that serve flagos tensors: those that serve the memory behind flagos."""
    return ("gloo", "nccl") if backing() == "cuda" else ("gloo",)


def register() -> None:
    """Register the backend once per process (torch_fl's import does it)."""
    global _registered
    if _registered or not dist.is_available():
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["cpu", DEVICE_NAME])
    # register_backend keeps an existing default for a device; flagos has none of PyTorch's, so this
    # only makes sure ours is the one `init_process_group()` picks for the flagos accelerator.
    dist.Backend.default_device_backend_map[DEVICE_NAME] = BACKEND_NAME
    for name in carriers():
        devices = dist.Backend.backend_capability.get(name)
        if devices is not None and DEVICE_NAME not in devices:
            devices.append(DEVICE_NAME)
    checkpoint_staging.install()
    _registered = True
