"""AMP support queries used by torch.autocast("flagos") and GradScaler("flagos")."""

from __future__ import annotations

import torch

from torch_fl.flagos._device import on_cuda


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    if on_cuda():
        return torch.cuda.is_bf16_supported(including_emulation)
    return True
