"""Dtype support queries used by torch.autocast("flagos"), GradScaler("flagos") and TF32 switches."""

from __future__ import annotations

import torch

from torch_fl.flagos._device import on_cuda


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    if on_cuda():
        return torch.cuda.is_bf16_supported(including_emulation)
    return True


def is_tf32_supported() -> bool:
    """Whether matmuls may run in TF32: the backing GPU's answer; host CPUs have no TF32."""
    if not on_cuda():
        return False
    query = getattr(torch.cuda, "is_tf32_supported", None)
    # torch.cuda's own rule where this torch has no is_tf32_supported: TF32 comes with native bf16.
    return query() if query is not None else torch.cuda.is_bf16_supported(including_emulation=False)
