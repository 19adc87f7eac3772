"""PyTorch's own checks of a call, made without running it.

A backend kernel of another project (FlagGems) may accept calls that PyTorch's kernels reject, such as an
in-place `mul_` whose result type cannot be cast to its integer `self`; that cast is checked by the CPU and
CUDA kernels only (the meta kernels accept it), so cast_check makes it with PyTorch's own type promotion,
before FlagGems' in-place/out= kernels run (backends/flaggems_defects.py). The meta kernels carry PyTorch's
other checks (shapes, out= types) and read or write nothing: the error policy (routing/policy.py) asks them
whether a call that raised on a backend was the caller's mistake.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from torch_fl.vocab import ops


def on_meta(a):
    """`a` with every tensor replaced by a meta tensor of the same geometry and dtype."""
    if isinstance(a, torch.Tensor):
        return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
    if isinstance(a, (list, tuple)):
        return type(a)(on_meta(x) for x in a)
    return a


def rejected_by_meta(op: str, args, kwargs) -> bool:
    """True when PyTorch's own checks reject the call, run on meta tensors of the same geometry: nothing is
    read or written. False where they accept it or cannot tell (no meta kernel)."""
    name, overload = ops.split(op)
    fn = getattr(getattr(torch.ops.aten, name), overload or "default")
    try:
        fn(*on_meta(args), **{k: on_meta(v) for k, v in kwargs.items()})
    except NotImplementedError:
        return False
    except Exception:  # noqa: BLE001  (any rejection counts: the native route would raise it too)
        return True
    return False


def cast_check(op: str) -> Callable[[tuple, dict], str | None] | None:
    """For a pointwise operator that writes its result to `self` (in-place) or `out`, a check(args, kwargs)
    giving PyTorch's error when the promoted type of the call's inputs cannot be cast to that tensor's dtype
    (`int64.mul_(float)`), else None; None for any other operator. Made once per operator: a call pays only
    for the promotion."""
    name, overload = ops.split(op)
    packet = getattr(getattr(torch.ops.aten, name, None), overload or "default", None)
    if packet is None or torch.Tag.pointwise not in packet.tags:
        return None
    in_place = name.endswith("_")

    def check(args: tuple, kwargs: dict) -> str | None:
        out = kwargs.get("out")
        if isinstance(out, torch.Tensor):
            inputs = [*args, *(v for k, v in kwargs.items() if k != "out")]
        elif in_place and args and isinstance(args[0], torch.Tensor):
            out, inputs = args[0], [*args, *kwargs.values()]
        else:
            return None
        operands = [a for a in inputs if isinstance(a, (torch.Tensor, bool, int, float, complex))]
        try:
            _, result = elementwise_dtypes(*operands, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        except Exception:  # noqa: BLE001  (operands PyTorch's promotion does not take: the kernel decides)
            return None
        if torch.can_cast(result, out.dtype):
            return None
        return f"result type {result} can't be cast to the desired output type {out.dtype}"

    return check
