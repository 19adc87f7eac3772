"""Gradients of routed operators that PyTorch differentiates by decomposing them.

Operators like rms_norm, pad, conv2d or hstack have no derivative of their
own: their CompositeImplicitAutograd kernel decomposes them and autograd
records the parts. PyTorch puts that kernel in the AutogradPrivateUse1 slot
only while PrivateUse1 has no kernel of its own, so routing such an operator
(any backend: a kernel of ours at PrivateUse1) would cut the autograd graph
there and gradients would silently stop at the operator.

For such an operator, from its first route on, a kernel at AutogradPrivateUse1
keeps PyTorch's behaviour: where a gradient is needed (grad mode on and an
input requires grad) the decomposition runs, each part routed as configured,
and the call counts as a fallback of the routed backend (it has no backward
for the operator); otherwise the routed kernel runs. It is registered once
and never removed (a running kernel may re-plan its own operator): when the
operator is native again it only decomposes, as PyTorch would.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch.utils._pytree import tree_flatten

from torch_fl.vocab import ops

# op -> (fallback_slot: [on_fallback(args, kwargs), or None while native], the library that keeps the kernel alive)
_GUARDS: dict[str, tuple[list, torch.library.Library]] = {}


def decomposed_for_autograd(op: str) -> bool:
    """True when PyTorch differentiates `op` through its CompositeImplicitAutograd decomposition."""
    q = ops.qualified(op)
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return has(q, "CompositeImplicitAutograd") and not has(q, "Autograd") and not has(q, "AutogradPrivateUse1")


def _needs_grad(args, kwargs) -> bool:
    if not torch.is_grad_enabled():
        return False
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in tree_flatten((args, kwargs))[0])


def _register(op: str, fallback_slot: list) -> torch.library.Library:
    name, overload = ops.split(op)
    packet = getattr(torch.ops.aten, name)
    fn = getattr(packet, overload or "default")

    def guard(*args, **kwargs):
        on_fallback = fallback_slot[0]
        if on_fallback is None or _needs_grad(args, kwargs):
            if on_fallback is not None:
                on_fallback(args, kwargs)
            return fn.decompose(*args, **kwargs)
        with torch._C._AutoDispatchBelowAutograd():
            return fn(*args, **kwargs)  # the routed kernel at PrivateUse1

    guard.__name__ = f"flagos_autograd_{op.replace('.', '_')}"
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 'Overriding a previously registered kernel'
        lib.impl(op, guard, "AutogradPrivateUse1")
    return lib


def set_routed(op: str, on_fallback: Callable | None) -> None:
    """`op` now has a kernel of ours at PrivateUse1; `on_fallback(args, kwargs)` accounts for a call that
    needs a gradient (and may raise under FLAGOS_STRICT=1). None: the op is native again."""
    entry = _GUARDS.get(op)
    if entry is None:
        if on_fallback is None or not decomposed_for_autograd(op):
            return
        fallback_slot: list = [None]
        entry = _GUARDS[op] = (fallback_slot, _register(op, fallback_slot))
    entry[0][0] = on_fallback


def is_guarded(op: str) -> bool:
    """True while `op` is routed and its gradient comes from the decomposition."""
    entry = _GUARDS.get(op)
    return entry is not None and entry[0][0] is not None
