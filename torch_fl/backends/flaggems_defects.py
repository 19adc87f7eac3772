"""Calls that FlagGems' own functions get wrong, caught before their kernels run.

A FlagGems function that faults the GPU (an illegal memory access) leaves the
CUDA context unusable: no fallback can recover, the process must end. One that
reads the wrong memory without faulting returns wrong values. Neither can be
told apart from a good call after the fact, so the calls such a function gets
wrong are named here, per function (matched by its module and name, so a
release that fixes it by moving or renaming it is no longer matched), and
refused before it runs: FlagGemsDefect, which the route's error policy
(routing/policy.py) treats like any backend defect: the call runs natively,
a fallback is counted, a warning says why once, and later calls of that dtype
run natively.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch


class FlagGemsDefect(Exception):
    """A call that a FlagGems function is known to get wrong (the message says which and why)."""


def _hopper_mul(a, b, *_, **__) -> str | None:
    """FlagGems 5.0.2's Hopper `mul`: for two real tensors of the same rank it runs a flat kernel over the
    first one's element count, reading the second at the same flat offsets and writing `empty_like(first)`:
    no broadcasting, strides or type promotion. Anything but two contiguous tensors of one shape and dtype
    reads outside the second tensor (Qwen3's `q * cos` in prefill faults the GPU) or computes wrong values."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.dim() != b.dim():
        return None  # its other branches are FlagGems' general pointwise kernels
    if a.is_complex() or b.is_complex():
        return None
    if a.shape == b.shape and a.dtype == b.dtype and a.is_contiguous() and b.is_contiguous():
        return None
    return (
        "FlagGems' Hopper mul treats two tensors of the same rank as flat arrays of one shape, dtype and layout "
        f"(got {tuple(a.shape)} {a.dtype} and {tuple(b.shape)} {b.dtype}, contiguous: "
        f"{a.is_contiguous()}/{b.is_contiguous()}); it would read outside its inputs"
    )


#: (module, function name) -> check(*args, **kwargs): None for a call the function gets right, else why not
_DEFECTS: dict[tuple[str, str], Callable[..., str | None]] = {
    ("flag_gems.runtime.backend._nvidia.hopper.ops.mul", "mul"): _hopper_mul,
}


def guarded(fn):
    """`fn` itself, or for a function with a known defect a wrapper that raises FlagGemsDefect for the calls
    it gets wrong (the check runs on the Python path and when the fast path records a signature; replays
    run only signatures that passed it)."""
    check = _DEFECTS.get((getattr(fn, "__module__", None), getattr(fn, "__name__", None)))
    if check is None:
        return fn

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        why = check(*args, **kwargs)
        if why is not None:
            raise FlagGemsDefect(why)
        return fn(*args, **kwargs)

    return checked
