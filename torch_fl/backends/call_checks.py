"""PyTorch's own checks of a call, made without running it.

A backend kernel of another project (FlagGems) may accept calls that PyTorch's kernels reject, such as an
in-place `mul_` whose result type cannot be cast to its integer `self`. The meta kernels carry most of the
CPU's and CUDA's checks (shapes, out= types) and read or write nothing; the cast of a pointwise result to
the tensor it is written to is checked by the CPU and CUDA kernels only, so it is checked here with
PyTorch's own type promotion. Used before FlagGems' in-place/out= kernels run (backends/flaggems_defects.py)
and by the error policy (routing/policy.py).
"""

from __future__ import annotations

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


def uncastable_result(op: str, args, kwargs) -> str | None:
    """For a pointwise operator that writes its result to `self` (in-place) or `out`, PyTorch's error when the
    promoted type of its inputs cannot be cast to that tensor's dtype (`int64.mul_(float)`), else None."""
    name, overload = ops.split(op)
    packet = getattr(getattr(torch.ops.aten, name), overload or "default")
    if torch.Tag.pointwise not in packet.tags:
        return None
    out = kwargs.get("out")
    if isinstance(out, torch.Tensor):
        inputs = [*args, *(v for k, v in kwargs.items() if k != "out")]
    elif name.endswith("_") and args and isinstance(args[0], torch.Tensor):
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
