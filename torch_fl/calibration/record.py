"""Recording a workload's operator calls on flagos: (operator, dtype, signature) with a count and an example.

A TorchDispatchMode sees each ATen call after autograd, as the flagos
device's kernels do. Each distinct signature (operator overload, every
tensor argument's shape, strides and dtype, the other arguments' values)
keeps a copy of its first call's arguments, taken before the call runs (an
in-place operator changes its inputs), to time and check later.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from torch_fl.vocab import ops


@dataclass(frozen=True)
class CallKey:
    """A signature: the operator, its dtype (the first tensor argument's, as routing decides) and the rest."""

    op: str  # normalised overload name: mm, add.Tensor
    dtype: torch.dtype | None
    signature: tuple  # per argument: ("T", shape, stride, dtype) for a tensor, else the value's repr


@dataclass
class Recorded:
    """One signature's calls: how many, how large (numel of the first tensor), and a copy of its arguments."""

    key: CallKey
    numel: int
    count: int = 0
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    kept: bool = False  # arguments kept (False past the per-operator limit)
    #: the value of the operator's class argument (vocab/ops.class_argument: pow's exponent), a number or bool;
    #: None when it has none or the call passed none
    value: int | float | bool | None = None

    @property
    def shapes(self) -> str:
        """The tensor arguments' shapes, e.g. '64x128, 128x256'."""
        out: list[str] = []

        def walk(d) -> None:
            if isinstance(d, tuple) and d[:1] == ("T",):
                out.append("x".join(map(str, d[1])) or "scalar")
            elif isinstance(d, tuple):
                for x in d:
                    walk(x)

        walk(self.key.signature)
        return ", ".join(out)


def _describe(a) -> object:
    if isinstance(a, torch.Tensor):
        return ("T", tuple(a.shape), tuple(a.stride()), str(a.dtype).removeprefix("torch."))
    if isinstance(a, (list, tuple)):
        return tuple(_describe(x) for x in a)
    return repr(a)


def first_tensor(args) -> torch.Tensor | None:
    for leaf in tree_flatten(args)[0]:
        if isinstance(leaf, torch.Tensor):
            return leaf
    return None


def class_value(op: str, args: tuple, kwargs: dict) -> int | float | bool | None:
    """The value a call passes for `op`'s class argument (its default when left out); None for anything but a
    number or bool, or an operator without one."""
    arg = ops.class_argument(op)
    if arg is None:
        return None
    name, i, default = arg
    v = args[i] if i < len(args) else kwargs.get(name, default)
    return v if isinstance(v, (bool, int, float)) else None


class Recorder(TorchDispatchMode):
    """Counts the flagos calls of the operators `wanted(op)` accepts; keeps up to `per_op` examples each."""

    def __init__(self, wanted: Callable[[str], bool], per_op: int = 32, device_type: str = "flagos"):
        super().__init__()
        self.wanted = wanted
        self.per_op = per_op
        self.device_type = device_type
        self.calls: dict[CallKey, Recorded] = {}
        self.kept: dict[str, int] = {}
        self.total = 0  # every flagos call seen, recorded or not
        self.skipped: dict[str, int] = {}  # operator -> calls not recorded (not a candidate)
        # One copy per tensor state: signatures of operators that write no argument share the copies of
        # the arguments they share (a weight).
        self._copies: dict[tuple, torch.Tensor] = {}

    def _copy(self, a, shared: bool):
        if not isinstance(a, torch.Tensor):
            return a
        if not shared:
            return a.detach().clone(memory_format=torch.preserve_format)
        key = (a.untyped_storage().data_ptr(), a.storage_offset(), a.shape, a.stride(), a.dtype, a._version)
        copy = self._copies.get(key)
        if copy is None:
            copy = self._copies[key] = a.detach().clone(memory_format=torch.preserve_format)
        return copy

    @property
    def unkept(self) -> int:
        """Signatures past the per-operator limit: counted, not measured."""
        return sum(not c.kept for c in self.calls.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self._note(func, args, kwargs)
        return func(*args, **kwargs)

    def _note(self, func, args, kwargs) -> None:
        if not isinstance(func, torch._ops.OpOverload) or func.namespace != "aten":
            return
        first = first_tensor((args, kwargs))
        if first is None or first.device.type != self.device_type:
            return
        self.total += 1
        op = ops.normalize(f"{func._schema.name}.{func._overloadname}")
        if not self.wanted(op):
            self.skipped[op] = self.skipped.get(op, 0) + 1
            return
        signature = tuple(_describe(a) for a in args) + tuple((k, _describe(v)) for k, v in sorted(kwargs.items()))
        key = CallKey(op, first.dtype, signature)
        rec = self.calls.get(key)
        if rec is None:
            rec = self.calls[key] = Recorded(key, first.numel(), value=class_value(op, args, kwargs))
            if self.kept.get(op, 0) < self.per_op:
                self.kept[op] = self.kept.get(op, 0) + 1
                # Timing an operator that writes its arguments changes them: those get copies of their own.
                copy = functools.partial(self._copy, shared=not ops.is_mutable(op))
                rec.args, rec.kwargs, rec.kept = tree_map(copy, args), tree_map(copy, kwargs), True
        rec.count += 1


def record(fn: Callable[[], object], wanted: Callable[[str], bool], per_op: int = 32) -> Recorder:
    """Run `fn()` once under a Recorder and return it."""
    rec = Recorder(wanted, per_op)
    with rec:
        fn()
    return rec
