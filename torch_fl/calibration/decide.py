"""From measurements to rules: size and argument classes per (operator, dtype), and the routing file that states them.

The signatures of one (operator, dtype) are grouped by the element count of
their first tensor (what a size rule tests). Each group goes to the candidate
when every signature in it was accepted and the candidate's time, weighted by
call counts, beats native's by `min_speedup`; adjacent groups with the same
winner merge into one class. The first class becomes `op[dtype] = backend`,
each later one `op[dtype, numel>=N] = backend`, N its smallest element count.

An operator with a class argument (its first Scalar, vocab/ops.class_argument:
pow's exponent) whose calls pass several values is classed per value first
when the candidate wins for some values and not for others (FlagGems' pow is
slower than PyTorch's x*x for exponent 2): each winning value's classes become
`op[dtype, exponent=3] = backend` (and `..., numel>=N`), the other values stay
on `op[dtype] = native`, as does a value the workload never passed.

Each rule carries its measurements in a trailing comment (`# calibrated: ...`,
which `explain` shows).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from torch_fl.calibration.measure import Measurement
from torch_fl.routing.conditions import SIZE_KEY, format_value
from torch_fl.routing.explain import MEASURED_TAG
from torch_fl.vocab import ops
from torch_fl.vocab.dtypes import dtype_name

#: the note on an operator's base rule when its calls are classed by argument value
OTHER_VALUES = "other values of its argument stay native"


@dataclass
class SizeClass:
    """Calls of (op, dtype) from `numel_lo` elements up (to the next class), and who runs them faster."""

    op: str
    dtype: torch.dtype
    backend: str  # "native" or the candidate
    candidate: str
    numel_lo: int
    numel_hi: int
    calls: int = 0
    shapes: int = 0
    native_s: float = 0.0  # total over the calls (count x median per call)
    candidate_s: float | None = 0.0  # None: some signature was rejected
    rejected: list[str] = field(default_factory=list)
    first: bool = True  # the dtype's (or the value's) base rule (no size condition)
    note: str | None = None  # why the class is not routed as its measurements say (confirm.py)
    arg: tuple[str, int | float | bool] | None = None  # an argument class: calls whose argument has this value

    @property
    def saved_s(self) -> float:
        """Time the chosen backend saves over native across the recorded calls."""
        return self.native_s - self.candidate_s if self.backend != "native" and self.candidate_s else 0.0

    @property
    def rule(self) -> str:
        conds = dtype_name(self.dtype)
        if self.arg is not None:
            conds += f", {self.arg[0]}={format_value(self.arg[1])}"
        if not self.first:
            conds += f", {SIZE_KEY}>={self.numel_lo}"
        return f"{self.op}[{conds}] = {self.backend}"

    @property
    def comment(self) -> str:
        """The measurements, one line: per-call means weighted by call counts."""
        per = lambda total: f"{total / self.calls * 1e6:.1f} us"  # noqa: E731
        size = f"numel {self.numel_lo}" + (f"..{self.numel_hi}" if self.numel_hi != self.numel_lo else "")
        plural = lambda n, what: f"{n} {what}{'s' if n != 1 else ''}"  # noqa: E731
        where = f"{plural(self.calls, 'call')}, {plural(self.shapes, 'shape')}, {size}"
        if self.candidate_s is None:
            why = self.rejected[0].replace("#", "") if self.rejected else "rejected"
            why = why if len(why) <= 160 else why[:157] + "..."
            return f"{MEASURED_TAG} native {per(self.native_s)}; {self.candidate} rejected: {why}; {where}"
        ratio = self.native_s / self.candidate_s if self.candidate_s > 0 else float("inf")
        return (
            f"{MEASURED_TAG} native {per(self.native_s)}, {self.candidate} {per(self.candidate_s)} "
            f"({ratio:.2f}x), {where}" + (f"; {self.note}" if self.note else "")
        )


def _group(ms: list[Measurement], candidate: str, min_speedup: float, op, dtype) -> SizeClass:
    c = SizeClass(op, dtype, "native", candidate, ms[0].call.numel, ms[0].call.numel)
    for m in ms:
        c.calls += m.call.count
        c.shapes += 1
        c.native_s += m.native_s * m.call.count
        if m.ok and c.candidate_s is not None:
            c.candidate_s += m.candidate_s * m.call.count
        elif not m.ok:
            c.candidate_s = None
            c.rejected.append(m.reason)
    if c.candidate_s is not None and c.candidate_s * min_speedup <= c.native_s:
        c.backend = candidate
    return c


def _merge(a: SizeClass, b: SizeClass) -> SizeClass:
    a.numel_hi = b.numel_hi
    a.calls += b.calls
    a.shapes += b.shapes
    a.native_s += b.native_s
    a.candidate_s = None if a.candidate_s is None or b.candidate_s is None else a.candidate_s + b.candidate_s
    a.rejected += b.rejected
    return a


def _by_size(ms: list[Measurement], candidate: str, min_speedup: float, op, dtype, arg=None) -> list[SizeClass]:
    """The size classes of one (operator, dtype)'s measurements (of one argument value, `arg`)."""
    by_numel: dict[int, list[Measurement]] = {}
    for m in ms:
        by_numel.setdefault(m.call.numel, []).append(m)
    classes: list[SizeClass] = []
    for numel in sorted(by_numel):
        g = _group(by_numel[numel], candidate, min_speedup, op, dtype)
        g.arg = arg
        if classes and classes[-1].backend == g.backend:
            _merge(classes[-1], g)
        else:
            g.first = not classes
            classes.append(g)
    return classes


def _by_value(ms: list[Measurement], candidate: str, min_speedup: float, op, dtype) -> list[SizeClass] | None:
    """Classes per value of `op`'s class argument when the candidate wins for some values and not for others;
    None when the values need no telling apart."""
    arg = ops.class_argument(op)
    values: dict[object, list[Measurement]] = {}
    for m in ms:
        if m.call.value is None:
            return None  # a call without a value (an optional argument left out) has no class of its own
        values.setdefault(m.call.value, []).append(m)
    if arg is None or len(values) < 2:
        return None
    per_value = {v: _by_size(vms, candidate, min_speedup, op, dtype, (arg[0], v)) for v, vms in values.items()}
    wins = {v: any(c.backend != "native" for c in cs) for v, cs in per_value.items()}
    if len(set(wins.values())) < 2:
        return None
    others = [m for v, vms in values.items() if not wins[v] for m in vms]
    base = _merge_all(_by_size(others, candidate, min_speedup, op, dtype))
    base.backend, base.note = "native", OTHER_VALUES
    out = [base]
    for v in sorted((v for v in values if wins[v]), key=float):
        out.extend(per_value[v])
    return out


def _merge_all(classes: list[SizeClass]) -> SizeClass:
    first = classes[0]
    for c in classes[1:]:
        _merge(first, c)
    return first


def size_classes(measurements: list[Measurement], candidate: str, min_speedup: float = 1.05) -> list[SizeClass]:
    """The classes of every (operator, dtype) measured, in order of operator, dtype, argument value and size."""
    if min_speedup < 1:
        raise ValueError(f"min_speedup must be 1 or more (the candidate must be at least as fast), not {min_speedup}")
    by_key: dict[tuple, list[Measurement]] = {}
    for m in measurements:
        by_key.setdefault((m.call.key.op, m.call.key.dtype), []).append(m)
    out: list[SizeClass] = []
    for (op, dtype), ms in sorted(by_key.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        valued = _by_value(ms, candidate, min_speedup, op, dtype)
        out.extend(valued if valued is not None else _by_size(ms, candidate, min_speedup, op, dtype))
    return out


def render(classes: list[SizeClass], header: list[str], include: str | None) -> str:
    """The routing file: header comments, the include, one rule per class with its measurements."""
    lines = [f"# {h}" if h else "#" for h in header]
    if include:
        lines += ["", f"include {include}"]
    prev = None
    for c in classes:
        if (c.op, c.dtype) != prev:
            lines.append("")
            prev = (c.op, c.dtype)
        lines.append(f"{c.rule:<48} # {c.comment}")
    return "\n".join(lines) + "\n"
