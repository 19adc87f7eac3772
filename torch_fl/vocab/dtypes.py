"""Dtype names as routing files, `mm[bfloat16]` keys and messages write them."""

from __future__ import annotations

import difflib

import torch

from torch_fl.vocab.errors import shorten

_DTYPE_ALIASES = {
    "float16": torch.float16,
    "half": torch.float16,
    "fp16": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float32": torch.float32,
    "float": torch.float32,
    "fp32": torch.float32,
    "float64": torch.float64,
    "double": torch.float64,
    "fp64": torch.float64,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int": torch.int32,
    "int64": torch.int64,
    "long": torch.int64,
    "bool": torch.bool,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
}


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
