"""What routing has registered with PyTorch, and the registering itself.

An operator routed anywhere but native runs a C++ _C.PyRoute at
PrivateUse1. It is registered at the operator's first such plan and never
removed: a later plan swaps its state, and an operator routed back to native
keeps the kernel in its native state (every call goes straight to the native
route). Removing a kernel that another thread is running would free it under
that thread, so route changes are safe while other threads dispatch.
"""

from __future__ import annotations

from torch_fl._core import _C
from torch_fl.routing.types import CoreTarget, Plan, Registration
from torch_fl.vocab import ops

#: op -> its plan and kernel, for operators whose plan is not all native
REGISTERED: dict[str, Registration] = {}

# scaled_dot_product_attention without gradients runs the backing device's
# own SDPA in one call unless one of these has a route of its own.
_ATTENTION_OPS = ("scaled_dot_product_attention", "_scaled_dot_product_", "_fused_sdp_choice")


def plan_of(op: str) -> Plan | None:
    """The plan `op`'s kernel runs, None while it runs the native route."""
    entry = REGISTERED.get(op)
    return None if entry is None else entry.plan


def remove(op: str) -> None:
    """Every call of `op` runs the C++ native route again."""
    entry = REGISTERED.pop(op, None)
    if entry is not None:
        entry.handle.set_native()


def install(
    op: str, plan: Plan, default: CoreTarget, by_dtype: tuple, by_size: tuple = (), by_value: tuple = ()
) -> None:
    """Run `op` by its PyRoute with these targets (the default, (dtype, target) pairs, (dtype or None,
    [(min_numel, target), ...]) size classes, and (dtype or None, [(value, target, size classes), ...]) value
    classes of the argument plan.arg)."""
    handle = _C.PyRoute(op)  # the operator's one kernel, registered at its first plan
    arg = ops.condition_arguments(op)[plan.arg] if by_value else -1
    handle.update(default, list(by_dtype), [(d, list(cs)) for d, cs in by_size], arg, list(by_value))
    REGISTERED[op] = Registration(plan, handle)


def note_attention_routes() -> None:
    """Tell the core whether an attention operator has a kernel of ours (its SDPA shortcut would skip it)."""
    _C._set_attention_routed(any(op.startswith(_ATTENTION_OPS) for op in REGISTERED))


def note_native_graphs(log_dispatch: bool) -> None:
    """Tell the core whether compiled graphs may run their calls on the backing device (torch_fl/compile/
    native_graph.py): every operator on the C++ native route, and no call to log."""
    _C._set_graphs_native(not REGISTERED and not log_dispatch)
