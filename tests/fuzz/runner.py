"""Running a fuzz program: on flagos, or on the CPU (the reference), one `Record` per step.

A record holds what the runs are compared on: the step's outcome, its result's dtype/shape/device, strides
and storage offset, which variables share a storage, whose version counters changed, and every variable's
value. With `calls=True` (reference runs only) a dispatch mode also notes the aten overloads each step calls:
the generator routes those.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.fuzz.env import Env, V, logical_device, storage_key
from tests.fuzz.steps import Func, InferenceMode, Observe, Step


@dataclass
class Record:
    """What one step did: its outcome, its result, storage sharing and every variable afterwards."""

    outcome: str  # "ok", "skipped" (an input is undefined) or "raised <ExceptionType>"
    message: str = ""
    result: tuple | None = None  # (dtype, shape, logical device) of the variable bound, or what Observe read
    strides: tuple | None = None  # the bound variable's (strides, storage offset)
    observed: bool = False  # PyTorch fixes those strides (a view, a layout-preserving copy): always compared
    sharing: frozenset = frozenset()  # groups (>1) of variables over one storage
    values: dict = field(default_factory=dict)  # var -> (logical device, CPU copy)
    bumped: frozenset = frozenset()  # variables whose version counter the step changed (what autograd checks)
    calls: frozenset = frozenset()  # the aten overloads the step called (reference runs with calls=True)
    call_dtypes: dict = field(default_factory=dict)  # and the dtype of each one's first tensor argument


def execute(step: Step, env: Env) -> Any:
    """Run `step`, binding its result; raises what the step raises."""
    r = step.run(env)
    out = getattr(step, "out", None)
    if out is not None:
        env.t[out] = r
        env.dev[out] = logical_device(r) if env.flagos else step.result_dev(env)
    return r


def _record(step: Step, env: Env, r: Any, snapshot: bool) -> Record:
    out = getattr(step, "out", None)
    if out is None and isinstance(step, Func) and isinstance(step.kwargs.get("out"), V):
        out = step.kwargs["out"].i  # an out= call's result is its out= tensor, bound or not
    result = strides = None
    if out is not None:
        t = env.t[out]
        # whether autograd sees a view: where PyTorch says (views, layout-keeping copies); elsewhere a kernel's
        # detail (the CPU's stack of inference tensors returns a view of its cat, CUDA's does not)
        result = (
            str(t.dtype),
            tuple(t.shape),
            env.dev[out],
            t.is_inference(),
            t._is_view() if step.strided() else None,
        )
        strides = (t.stride(), t.storage_offset())
    elif isinstance(step, Observe):
        result = r
    groups: dict[int, set[int]] = {}
    for i, t in env.t.items():
        groups.setdefault(storage_key(t), set()).add(i)
    sharing = frozenset(frozenset(g) for g in groups.values() if len(g) > 1)
    values = {i: (env.dev[i], t.detach().to("cpu", copy=True)) for i, t in env.t.items()} if snapshot else {}
    return Record("ok", "", result, strides, step.strided(), sharing, values)


def run(
    program: list[Step], flagos: bool, snapshot_every_step: bool = True, calls: bool = False, native: str = "cpu"
) -> list[Record]:
    """Run `program` on flagos (or on the CPU, the reference; `native="cuda"`: the flagos devices' tensors on
    the GPU instead); one Record per step (with the aten overloads each step calls if `calls`: only on the CPU,
    where a dispatch mode changes nothing under test)."""
    env = Env(flagos, native)
    records = []
    versions: dict[int, int | None] = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for k, step in enumerate(program):
                last = k == len(program) - 1
                if any(i not in env.t for i in step.refs()):
                    records.append(Record("skipped"))
                    continue
                called: set[str] = set()
                dtypes: dict[str, str] = {}
                try:
                    mode = _Ops(called, dtypes) if calls and not isinstance(step, InferenceMode) else None
                    with mode or contextlib.nullcontext():
                        r = execute(step, env)
                except Exception as e:  # noqa: BLE001  (an outcome to compare)
                    out = getattr(step, "out", None)
                    env.t.pop(out, None)
                    rec = _record(Step(), env, None, snapshot_every_step or last)
                    rec.outcome, rec.message = f"raised {type(e).__name__}", (str(e).splitlines() or [""])[0]
                else:
                    rec = _record(step, env, r, snapshot_every_step or last)
                rec.calls, rec.call_dtypes = frozenset(called), dtypes
                now = {i: _version(t) for i, t in env.t.items()}
                rec.bumped = frozenset(i for i, v in now.items() if i in versions and v != versions[i])
                versions = now
                records.append(rec)
    finally:
        env.close()
    return records


def _version(t: torch.Tensor) -> int | None:
    return None if t.is_inference() else t._version


#: overloads the generated steps run on the CPU only (inputs made there, index lists): routes change nothing
_CPU_ONLY = frozenset({"randint", "lift_fresh", "detach", "_to_copy"})


class _Ops(TorchDispatchMode):
    """Notes the aten overloads called ("add_.Tensor", "clone")."""

    def __init__(self, seen: set[str], dtypes: dict[str, str] | None = None):
        super().__init__()
        self.seen = seen
        self.dtypes = dtypes  # op -> dtype of its first tensor argument (what a dtype route selects by)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name, overload = func._schema.name.removeprefix("aten::"), func._overloadname
        if name not in _CPU_ONLY:
            op = name if overload == "default" else f"{name}.{overload}"
            self.seen.add(op)
            first = next(iter(_tensors(list(args) + list((kwargs or {}).values()))), None)
            if self.dtypes is not None and first is not None:
                self.dtypes.setdefault(op, str(first.dtype).removeprefix("torch."))
        return func(*args, **(kwargs or {}))


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for a in x:
            yield from _tensors(a)
