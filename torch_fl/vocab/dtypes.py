"""Dtype names as routing files, `mm[bfloat16]` keys and messages write them."""

from __future__ import annotations

import difflib
import re

import torch

from torch_fl.vocab.errors import shorten

# Every dtype a flagos tensor can hold, by torch's own names (torch.float16, torch.half, torch.uint32, ...),
# and the short names people write. Quantized dtypes (refused on flagos), bit containers and the sub-byte
# integer shells are left out: no flagos call has them.
_DTYPE_ALIASES = {
    name: value
    for name, value in vars(torch).items()
    if isinstance(value, torch.dtype) and not re.fullmatch(r"q.*|bits?.*|u?int[1-7]", name)
} | {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64}


def parse_dtype(text: str) -> torch.dtype:
    key = text.strip().lower().removeprefix("torch.")
    try:
        return _DTYPE_ALIASES[key]
    except KeyError:
        hints = difflib.get_close_matches(key, list(_DTYPE_ALIASES), n=3)
        did = f" Did you mean {', '.join(hints)}?" if hints else ""
        names = ", ".join(sorted(set(_DTYPE_ALIASES)))
        raise ValueError(f"unknown dtype '{shorten(text.strip())}'.{did} Use a torch dtype name: {names}.") from None


def dtype_name(dtype: torch.dtype | None) -> str:
    return "any" if dtype is None else str(dtype).removeprefix("torch.")
