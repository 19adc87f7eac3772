"""The operators only the native route may run: the one definition of that set.

Two kinds, each with the reason routing errors and notes give:

* the operators the flagos core implements itself (empty, view, set_, _copy_from, ...;
  _C._core_ops());
* the CPU fallback's and device transfers' own operators. PyTorch's CPU fallback
  (at::native::cpu_fallback, which the `cpu_fallback` backend and the native route's
  last resort both run) moves the inputs to the host with at::_to_cpu (Tensor.cpu():
  to.dtype_layout -> _to_copy -> empty_strided + copy_ -> _copy_from), writes
  in-place/out= results back with _copy_from_and_resize (and their geometry with
  as_strided_), and moves results back with Tensor.to(device) (to.device -> _to_copy). `tensor.cpu()` and
  `.to("flagos")` take the same path. Routed to cpu_fallback, one of these makes the
  fallback call itself (unbounded recursion) or hand back host tensors; routed to
  another backend, device transfers would leave the core.

* the view operators (a result that shares an input's memory, `Tensor(a)` in the schema:
  t, transpose, expand, select, ...). A backend that computes elsewhere (the CPU fallback's
  host copies) cannot return a view, and the kernel a route registers would stay in the
  dispatcher after the route is cleared, so views always run natively (views of tensors
  made in inference mode among them).

A glob skips these operators (with a note); a rule naming one routes it to a native
backend or is an error.
"""

from __future__ import annotations

import functools

from torch_fl import backends
from torch_fl._core import _C
from torch_fl.vocab import ops

#: The CPU fallback's and device transfers' operators (see the module docstring); the core
#: implements some of them too.
TRANSFER_OPS = frozenset(
    {
        "_to_cpu",  # the fallback's first step
        "_to_copy",  # under Tensor.cpu() and Tensor.to(device): the fallback's way in and out
        "to.device",  # Tensor.to(device): how the fallback moves results back
        "to.dtype",
        "to.dtype_layout",  # Tensor.cpu()
        "to.other",
        "copy_",  # _to_copy's second half
        "_copy_from",  # copy_ across devices
        "_copy_from_and_resize",  # the fallback writes in-place/out= results back with it
        "empty.memory_format",  # _to_copy's result
        "empty_strided",
        "resize_",  # _copy_from_and_resize
        "as_strided_",  # the fallback gives an in-place result its host geometry with it (take_resized)
    }
)

_CORE_REASON = "aten::{op} is implemented by the flagos core itself"
_TRANSFER_REASON = (
    "aten::{op} carries the CPU fallback's and device transfers' own copies (tensor.cpu(), .to('flagos')); "
    "away from the native route the fallback would call itself or return host tensors"
)


@functools.cache
def core_ops() -> frozenset[str]:
    """The operators the flagos core registers itself (csrc/ops/core_ops.h); fixed once the extension is loaded."""
    return frozenset(ops.normalize(name) for name in _C._core_ops())


@functools.cache
def names() -> frozenset[str]:
    """Every operator only the native route may run."""
    return core_ops() | TRANSFER_OPS


_VIEW_REASON = (
    "aten::{op} returns a view of its input (the result shares the input's memory), which only the native route makes"
)


@functools.cache
def _returns_view(op: str) -> bool:
    try:
        return ops.makes_views(op) and not ops.is_mutable(op)
    except RuntimeError:  # not an operator: the caller's own check names it
        return False


def reason(op: str) -> str | None:
    """Why `op` (normalised) runs on the native route only, or None when it may be routed."""
    if op in TRANSFER_OPS:
        return _TRANSFER_REASON.format(op=op)
    if op in core_ops():
        return _CORE_REASON.format(op=op)
    if _returns_view(op):
        return _VIEW_REASON.format(op=op)
    return None


def is_native_only(op: str) -> bool:
    """Whether `op` (normalised) runs on the native route only (reason() says why)."""
    return reason(op) is not None


def route_problem(op: str, backend: str) -> str | None:
    """Why `op` (normalised) cannot be routed to `backend` (a valid name), or None when it can."""
    why = reason(op)
    if why is None or backends.get(backend).native:
        return None
    return f"aten::{op} cannot be routed to '{backend}': {why}. Remove the rule; it runs on the native route"
