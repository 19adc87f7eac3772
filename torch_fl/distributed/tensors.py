"""flagos tensors as the backing device's tensors, for the inner process group.

Each flagos tensor is handed on as its zero-copy native alias (`torch_fl.as_native`: the same bytes,
the same geometry, tagged cuda:i or cpu), so what gloo or NCCL writes lands in the caller's flagos
tensor. Tensors of any other device pass unchanged (CPU tensors of object collectives, for one).
"""

from __future__ import annotations

import torch

from torch_fl._core import DEVICE_NAME, as_native, backing


def native(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor the inner backend sees: a flagos tensor's native alias, any other tensor itself."""
    return as_native(tensor) if tensor.device.type == DEVICE_NAME else tensor


def natives(tensors) -> list[torch.Tensor]:
    return [native(t) for t in tensors]


def nested(lists) -> list[list[torch.Tensor]]:
    return [natives(ts) for ts in lists]


def native_device(device: torch.device | None) -> torch.device | None:
    """flagos:i -> the device backing it (cuda:i, or cpu on host memory); other devices unchanged."""
    if device is None or device.type != DEVICE_NAME:
        return device
    if backing() == "cuda":
        return torch.device("cuda", device.index)
    return torch.device("cpu")
