"""torch.distributed.checkpoint copies flagos tensors to the host before writing them.

DCP's file writer stages device tensors to host memory with `_OverlappingCpuLoader`, which copies
only tensors of one device type: `torch._utils._get_available_device_type()`, a lookup that puts
CUDA before the PrivateUse1 device. With flagos over CUDA it answers "cuda", flagos tensors reach
the writer uncopied and the save fails ("Tensor must be on CPU"). PyTorch's accelerator order
(`torch.accelerator.current_accelerator()`) puts the PrivateUse1 device first, and in a process that
imported torch_fl flagos is that accelerator; the writer's lookup is made to follow it. Nothing else
in PyTorch changes: the lookup is replaced in the writer's module only, once it is imported.
"""

from __future__ import annotations

import torch

from torch_fl._core import DEVICE_NAME
from torch_fl._import_hook import when_imported

MODULE = "torch.distributed.checkpoint.filesystem"


def _align(filesystem) -> None:
    original = filesystem._get_available_device_type
    if getattr(original, "_flagos", False):
        return

    def staging_device_type():
        if torch.flagos.is_available():
            return DEVICE_NAME
        return original()

    staging_device_type._flagos = True
    filesystem._get_available_device_type = staging_device_type


def install() -> None:
    """Align DCP's staging device with flagos when DCP's writer is imported (now if it already is)."""
    when_imported(MODULE, _align)
