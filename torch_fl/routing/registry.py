"""What routing has registered with PyTorch, and the registering itself.

Per operator at most one kernel of ours at PrivateUse1: a C++
torch_fl._C.PyRoute (a plan that calls a FlagGems function) or a Python kernel
registered through its own torch.library.Library as a trampoline to a kernel
slot. Either is registered once and a later plan of the same kind swaps its
state: torch refuses a second Python kernel for the same op and key, and a
failing kernel re-plans its own operator while it runs. Removing it gives the
operator back to the C++ native route. An all-native operator has no kernel
of ours, only the dispatch-log label of its native route.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

import torch_fl
from torch_fl.routing.types import Plan, PyRouteArgs, Registration

#: op -> its kernel of ours
REGISTERED: dict[str, Registration] = {}
#: op -> the native route's dispatch-log label we set for it
LABELS: dict[str, str] = {}

# scaled_dot_product_attention without gradients runs the backing device's
# own SDPA in one call unless one of these has a route of its own.
_ATTENTION_OPS = ("scaled_dot_product_attention", "_scaled_dot_product_", "_fused_sdp_choice")


def plan_of(op: str) -> Plan | None:
    """The plan `op`'s kernel runs, None without one."""
    entry = REGISTERED.get(op)
    return None if entry is None else entry.plan


def runs_in_cpp(op: str) -> bool:
    """True when `op`'s kernel is a torch_fl._C.PyRoute."""
    entry = REGISTERED.get(op)
    return entry is not None and isinstance(entry.handle, torch_fl._C.PyRoute)


def _register_trampoline(op: str, kernel_slot: list[Callable]) -> torch.library.Library:
    """Register a kernel for `op` at PrivateUse1 that calls whatever kernel_slot[0] holds at the time."""

    def trampoline(*args, **kwargs):
        return kernel_slot[0](*args, **kwargs)

    trampoline.__name__ = f"flagos_route_{op.replace('.', '_')}"
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 'Overriding a previously registered kernel': that is the point
        lib.impl(op, trampoline, "PrivateUse1")
    return lib


def _unregister(handle) -> None:
    if isinstance(handle, torch_fl._C.PyRoute):
        handle.destroy()
    else:
        handle._destroy()


def remove(op: str) -> None:
    """Remove `op`'s kernel, if any: the C++ native route takes over."""
    entry = REGISTERED.pop(op, None)
    if entry is not None:
        _unregister(entry.handle)


def install_pyroute(op: str, plan: Plan, args: PyRouteArgs) -> None:
    """Run `op` by a torch_fl._C.PyRoute with `args`, reusing the one already registered."""
    old = REGISTERED.get(op)
    if old is not None and not isinstance(old.handle, torch_fl._C.PyRoute):
        remove(op)
        old = None
    handle = old.handle if old is not None else torch_fl._C.PyRoute(op)
    handle.update(
        args.fn, args.on_error, args.other_dtype, args.other, args.on_empty, args.counters, label=plan.default.backend
    )
    REGISTERED[op] = Registration(plan, handle)


def install_python(op: str, plan: Plan, kernel: Callable) -> None:
    """Run `op` by the Python `kernel`, swapped into the trampoline already registered if there is one."""
    old = REGISTERED.get(op)
    if old is not None and isinstance(old.handle, torch_fl._C.PyRoute):
        remove(op)
        old = None
    if old is not None:
        old.kernel_slot[0] = kernel
        REGISTERED[op] = Registration(plan, old.handle, old.kernel_slot)
    else:
        kernel_slot = [kernel]
        REGISTERED[op] = Registration(plan, _register_trampoline(op, kernel_slot), kernel_slot)


def set_label(op: str, label: str | None) -> None:
    """The backend name the native route's dispatch log prints for `op` (None: the platform's)."""
    if label is None:
        if LABELS.pop(op, None) is not None:
            torch_fl._C._set_native_label(op, "")
    elif LABELS.get(op) != label:
        torch_fl._C._set_native_label(op, label)
        LABELS[op] = label


def note_attention_routes() -> None:
    """Tell the core whether an attention operator has a kernel of ours (its SDPA shortcut would skip it)."""
    torch_fl._C._set_attention_routed(any(op.startswith(_ATTENTION_OPS) for op in REGISTERED))
