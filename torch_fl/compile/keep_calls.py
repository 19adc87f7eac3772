"""Keep chosen operators as calls in compiled flagos graphs, so they still run on their routes.

Inductor fuses most operators into its own kernels: such an operator no longer reaches the dispatcher, so its
flagos route (FlagGems, say) no longer runs. `keep_as_calls(ops)` makes inductor leave those operators as
calls in flagos graphs (an extern kernel that calls the operator through the dispatcher, as inductor does for
operators it has no lowering for), so each call runs on its route and is counted in routing.stats().

It works on two of inductor's tables, for flagos tensors only (graphs on other devices compile as before):
- the decomposition table: a kept operator is not decomposed into smaller ones when its inputs are on flagos;
- the lowering table: a kept operator becomes a fallback kernel (a call) when its inputs are on flagos.
Graphs compiled before a change keep their code (torch._dynamo.reset() recompiles); the kept set is part of
inductor's cache key (see backend.FlagosGraphPass), so no cached graph compiled with another set is reused.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterable

import torch

from torch_fl._core import DEVICE_NAME
from torch_fl.vocab import ops as op_names
from torch_fl.vocab.errors import RoutingError

_LOCK = threading.Lock()
_KEPT: dict[torch._ops.OpOverload, str] = {}  # overload -> name as the user wrote it (normalised)
_WRAPPED: set[torch._ops.OpOverload] = set()
FLAGGEMS = "flaggems"  # keep_as_calls("flaggems"): the operators routed to FlagGems now


def _overload(name: str) -> torch._ops.OpOverload:
    name = op_names.normalize(name)
    if op_names.is_glob(name) or not op_names.is_known(name):
        raise RoutingError(op_names.unknown_op_message(name))
    packet, overload = op_names.split(name)
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def _names(ops: str | Iterable[str]) -> list[str]:
    if isinstance(ops, str):
        if ops == FLAGGEMS:
            from torch_fl import routing

            return routing.flaggems_ops()
        return [ops]
    return list(ops)


def _on_flagos(values) -> bool:
    """Whether any tensor (or inductor IR node) among `values` is on a flagos device."""
    for v in torch.utils._pytree.tree_leaves(values):
        device = getattr(v, "device", None) if isinstance(v, torch.Tensor) else _ir_device(v)
        if device is not None and device.type == DEVICE_NAME:
            return True
    return False


def _ir_device(v):
    get_device = getattr(v, "get_device", None)
    if get_device is None or isinstance(v, torch.Tensor):
        return None
    try:
        return get_device()
    except (AttributeError, NotImplementedError):  # IR nodes without a device (constants, symbols)
        return None


def _kept_decomposition(op, original):
    @functools.wraps(original)
    def decomposition(*args, **kwargs):
        if op in _KEPT and _on_flagos((args, kwargs)):
            return NotImplemented  # make_fx then records the operator itself
        return original(*args, **kwargs)

    return decomposition


def _kept_lowering(op, original):
    from torch._inductor.lowering import fallback_handler

    call = fallback_handler(op, add_to_fallback_set=False)

    def lowering(*args, **kwargs):
        if op in _KEPT and _on_flagos((args, kwargs)):
            return call(*args, **kwargs)
        return (original or call)(*args, **kwargs)

    return lowering


def _wrap(op: torch._ops.OpOverload) -> None:
    """Put the flagos check in front of op's decomposition and lowering (once per operator)."""
    if op in _WRAPPED:
        return
    from torch._inductor import decomposition, lowering

    tables = [decomposition.decompositions]
    fast = getattr(decomposition, "fast_random_decomps", None)
    if fast is not None:
        tables.append(fast())  # a cached copy of the table, used unless config.fallback_random
    for table in tables:
        if op in table:
            table[op] = _kept_decomposition(op, table[op])
    lowering.lowerings[op] = _kept_lowering(op, lowering.lowerings.get(op))
    _WRAPPED.add(op)


def keep_as_calls(ops: str | Iterable[str]) -> None:
    """Keep `ops` (ATen overload names as routing writes them: "silu", "mul.Tensor"; or "flaggems" for the
    operators routed to FlagGems now) as calls in flagos graphs compiled from now on."""
    overloads = {_overload(name): op_names.normalize(name) for name in _names(ops)}
    with _LOCK:
        for op in overloads:
            _wrap(op)
        _KEPT.update(overloads)


def stop_keeping(ops: str | Iterable[str] | None = None) -> None:
    """Let inductor fuse `ops` again (all kept operators when None) in flagos graphs compiled from now on."""
    with _LOCK:
        if ops is None:
            _KEPT.clear()
            return
        for name in _names(ops):
            _KEPT.pop(_overload(name), None)


def is_kept(op: torch._ops.OpOverload) -> bool:
    """Whether `op` is kept as a call (its graphs then run on their routes, native_graph.py)."""
    return op in _KEPT


def kept_calls() -> list[str]:
    """The operators kept as calls in flagos graphs, sorted."""
    return sorted(_KEPT.values())


@contextlib.contextmanager
def keeping_calls(ops: str | Iterable[str]):
    """`with keeping_calls(["silu"]): torch.compile(model)(x)`: kept for compiles inside the block."""
    before = dict(_KEPT)
    keep_as_calls(ops)
    try:
        yield
    finally:
        with _LOCK:
            _KEPT.clear()
            _KEPT.update(before)
