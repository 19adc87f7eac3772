"""explain(op): which rules match an operator, which one wins, and what will run."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from torch_fl import backends
from torch_fl._core import _C, backing
from torch_fl.routing import autograd_guard, native_only, registry, rules
from torch_fl.routing.conditions import format_value
from torch_fl.routing.config import Rule
from torch_fl.routing.state import STATE, all_rules
from torch_fl.vocab.dtypes import dtype_name, parse_dtype
from torch_fl.vocab.ops import parse_op_key

#: what `python -m torch_fl calibrate` writes after a rule: the measurements behind it
MEASURED_TAG = "calibrated:"


def measured(rule: Rule) -> str | None:
    """The measurements a calibrated rule carries in its trailing comment ('# calibrated: ...'), else None."""
    _, _, comment = rule.text.partition("#")
    comment = comment.strip()
    return comment[len(MEASURED_TAG) :].strip() if comment.startswith(MEASURED_TAG) else None


@dataclass
class Candidate:
    rule: Rule
    status: str  # "taken" | "shadowed" | "rejected" | "other dtype" | "size class" | "value class"
    why: str

    @property
    def measured(self) -> str | None:
        return measured(self.rule)


@dataclass
class SizeClass:
    """Calls whose first tensor has at least `min_numel` elements take `rule` (up to the next class)."""

    min_numel: int
    rule: Rule
    runs_on: str
    reason: str | None


@dataclass
class ValueClass:
    """Calls whose tested argument equals `value` take `rule` (None: the native route), and its size classes."""

    arg: str
    value: object
    rule: Rule | None
    runs_on: str
    reason: str | None
    sizes: list[SizeClass] = field(default_factory=list)

    @property
    def condition(self) -> str:
        return f"{self.arg}={format_value(self.value)}"


@dataclass
class Explanation:
    op: str
    dtype: torch.dtype | None
    routed_to: str  # backend as written, or the platform name when nothing routes it
    runs_on: str  # what actually runs: the backend, or native when it falls back
    reason: str | None  # why it falls back, if it does
    candidates: list[Candidate] = field(default_factory=list)
    backend_notes: list[str] = field(default_factory=list)
    kernel: str = ""  # "python kernel" or "C++ native route"
    default_taken: bool = True  # no rule applies: the platform's native route
    replay: dict | None = None  # record and replay's counts (route flaggems): PyRoute(op).replay_stats()
    sizes: list[SizeClass] = field(default_factory=list)  # size rules for this dtype, smallest threshold first
    values: list[ValueClass] = field(default_factory=list)  # argument rules' classes for this dtype

    def __str__(self) -> str:
        lines = [f"aten::{self.op}  (dtype: {dtype_name(self.dtype)})"]
        runs = self.runs_on if self.reason is None else f"{self.runs_on}  (fallback: {self.reason})"
        lines.append(f"  routed to: {self.routed_to}")
        lines.append(f"  runs on:   {runs}")
        lines.append(f"  kernel:    {self.kernel}")
        lines.append("  candidates, highest precedence first:")
        if not self.candidates:
            lines.append("    (no rule names this operator)")
        for i, c in enumerate(self.candidates, start=1):
            lines.append(f"    {i}. {c.rule.written:<40} {c.rule.source}")
            lines.append(f"       {c.status}: {c.why}")
            if c.measured:
                lines.append(f"       measured: {c.measured}")
        lines.append(f"    {len(self.candidates) + 1}. default: native route ({backing()})")
        lines.append("       taken: no rule applies" if self.default_taken else "       not used: a rule applies")
        if self.sizes:
            lines.append("  by size (elements of the first tensor argument); smaller calls take the route above:")
            for s in self.sizes:
                runs = s.runs_on if s.reason is None else f"{s.runs_on}  (fallback: {s.reason})"
                lines.append(f"    numel>={s.min_numel:<12} {s.rule.written}  ->  {runs}  ({s.rule.source})")
                if measured(s.rule):
                    lines.append(f"      measured: {measured(s.rule)}")
        if self.values:
            lines.append("  by argument (calls with these values take these routes instead):")
            for v in self.values:
                written = v.rule.written if v.rule is not None else "(no rule)"
                source = f"  ({v.rule.source})" if v.rule is not None else ""
                runs = v.runs_on if v.reason is None else f"{v.runs_on}  (fallback: {v.reason})"
                lines.append(f"    {v.condition:<19} {written}  ->  {runs}{source}")
                for s in v.sizes:
                    runs = s.runs_on if s.reason is None else f"{s.runs_on}  (fallback: {s.reason})"
                    lines.append(f"      numel>={s.min_numel:<10} {s.rule.written}  ->  {runs}  ({s.rule.source})")
        if self.replay is not None:
            f = self.replay
            lines.append(
                f"  replay: {f['hits']} calls replayed, {f['recorded']} recorded, {f['python']} on the Python "
                f"function; {f['programs']} of {f['signatures']} signatures replayable (keeps {f['capacity']})"
            )
            for why, calls in f["reasons"].items():
                lines.append(f"    stays on Python ({calls} calls): {why}")
        for note in self.backend_notes:
            lines.append(f"  note: {note}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {
            "op": self.op,
            "dtype": dtype_name(self.dtype),
            "routed_to": self.routed_to,
            "runs_on": self.runs_on,
            "reason": self.reason,
            "kernel": self.kernel,
            "candidates": [
                {
                    "rule": c.rule.written,
                    "source": c.rule.source,
                    "status": c.status,
                    "why": c.why,
                    "measured": c.measured,
                }
                for c in self.candidates
            ],
            "sizes": [
                {
                    "min_numel": s.min_numel,
                    "rule": s.rule.written,
                    "source": s.rule.source,
                    "runs_on": s.runs_on,
                    "reason": s.reason,
                    "measured": measured(s.rule),
                }
                for s in self.sizes
            ],
            "values": [
                {
                    "condition": v.condition,
                    "rule": v.rule.written if v.rule is not None else None,
                    "runs_on": v.runs_on,
                    "reason": v.reason,
                    "sizes": [
                        {"min_numel": s.min_numel, "rule": s.rule.written, "runs_on": s.runs_on} for s in v.sizes
                    ],
                }
                for v in self.values
            ],
            "notes": self.backend_notes,
            "replay": self.replay,
        }


def explain(op: str, dtype=None) -> Explanation:
    norm, key_dtype = parse_op_key(op)
    if isinstance(dtype, str):
        dtype = parse_dtype(dtype)
    dtype = dtype if dtype is not None else key_dtype
    matching = [r for r in all_rules() if r.matches(norm)]
    matching.sort(key=Rule.specificity, reverse=True)
    applicable = [r for r in matching if r.dtype is None or r.dtype == dtype]
    failed = STATE.failed.get(norm, ())
    route = STATE.resolved.get(norm)
    winner: Rule | None = None
    classes: tuple = ()
    if route is not None:
        winner = route.default
        if dtype is not None:
            for d, r in route.by_dtype:
                if d == dtype:
                    winner = r
        classes = _classes_for(route, dtype)
    value_classes = _values_for(route, dtype) if route is not None else ()
    # by value: all_rules() makes the rules out= overloads take from their functional ones anew each time
    in_class = {r: n for n, r in classes}
    in_value = {r: v for v, base, cs in value_classes for r in (base, *(r for _, r in cs)) if r is not None}
    cands: list[Candidate] = []
    for r in matching:
        if r.dtype is not None and r.dtype != dtype:
            cands.append(Candidate(r, "other dtype", f"applies only to {dtype_name(r.dtype)} calls"))
            continue
        if r.arg is not None:
            if r in in_value:
                why = f"calls whose {r.arg[0]} is {format_value(in_value[r])} (see 'by argument')"
                cands.append(Candidate(r, "value class", why))
            else:
                cands.append(Candidate(r, "shadowed", "a more specific rule takes these calls (see 'by argument')"))
            continue
        if r.min_numel is not None and not (r.is_glob and norm not in rules.glob_targets(r)):
            if r in in_class:
                why = f"calls with at least {in_class[r]} elements in their first tensor (see 'by size')"
                cands.append(Candidate(r, "size class", why))
            else:
                cands.append(Candidate(r, "shadowed", "a more specific rule takes these sizes (see 'by size')"))
            continue
        if r.is_glob and norm not in rules.glob_targets(r):
            why = rules.glob_skip_reason(r, norm)
            cands.append(Candidate(r, "rejected", f"glob rules apply only to operators their backend can run: {why}"))
            continue
        if r == winner:
            t = rules.target_for(norm, r, dtype, failed)
            if t.kind == "fallback":
                cands.append(Candidate(r, "taken", f"most specific; but falls back to native: {t.reason}"))
            else:
                below = " (for calls below the size thresholds)" if classes else ""
                cands.append(Candidate(r, "taken", f"most specific applicable rule{below}"))
            continue
        if winner is not None:
            cands.append(Candidate(r, "shadowed", f"'{winner.written}' ({winner.source}) takes precedence"))
        else:
            cands.append(Candidate(r, "shadowed", "a more specific rule takes precedence"))
    target = rules.target_for(norm, winner, dtype, failed)
    routed = winner.backend if winner is not None else backing()
    runs = routed if target.kind != "fallback" else f"native ({backing()})"
    notes = []
    for r in applicable:
        b = backends.get(r.backend)
        if not b.available():
            notes.append(f"{r.backend}: {b.unavailable_reason()}")
    if rules.core_op(norm):
        notes.append(f"{native_only.reason(norm)}: only native routes apply")
    registered = registry.plan_of(norm) is not None
    if registered and autograd_guard.is_guarded(norm):
        notes.append(
            f"PyTorch differentiates aten::{norm} by decomposing it: calls that need a gradient run that "
            f"decomposition (counted as a fallback of '{routed}'), the others '{routed}'"
        )
    if target.kind not in ("native", "fallback") and backends.get(routed).empty_inputs_unsafe:
        notes.append(f"calls with an empty input tensor run natively (counted as a fallback of '{routed}')")
    kernel = "C++ routed kernel (PyRoute, PrivateUse1)" if registered else "C++ native route"
    replayed = None
    if registered and target.kind == "kernel" and backends.get(routed).replay:
        replayed = _C.PyRoute(norm).replay_stats()
    sizes = []
    for n, r in classes:
        t = rules.target_for(norm, r, dtype, failed)
        sizes.append(SizeClass(n, r, r.backend if t.kind != "fallback" else f"native ({backing()})", t.reason))

    def runs_on(r: Rule | None) -> tuple[str, str | None]:
        t = rules.target_for(norm, r, dtype, failed)
        if t.kind == "fallback":
            return f"native ({backing()})", t.reason
        return (r.backend if r is not None else backing()), None

    values = [
        ValueClass(
            route.arg,
            v,
            base,
            *runs_on(base),
            [SizeClass(n, r, *runs_on(r)) for n, r in cs],
        )
        for v, base, cs in value_classes
    ]
    return Explanation(
        norm, dtype, routed, runs, target.reason, cands, sorted(set(notes)), kernel, winner is None, replayed, sizes,
        values,
    )  # fmt: skip


def _values_for(route, dtype) -> tuple:
    """The value classes calls of `dtype` take: the dtype's own, else (for a dtype without a target, size or
    value classes of its own) the dtype-less ones."""
    values = dict(route.by_value)
    if dtype in values:
        return values[dtype]
    if dtype is not None and (any(d == dtype for d, _ in route.by_dtype) or dtype in dict(route.by_size)):
        return ()
    return values.get(None, ())


def _classes_for(route, dtype) -> tuple:
    """The size classes calls of `dtype` take: the dtype's own, else (for a dtype without a route of its own)
    the dtype-less ones."""
    sizes = dict(route.by_size)
    if dtype in sizes:
        return sizes[dtype]
    if dtype is not None and any(d == dtype for d, _ in route.by_dtype):
        return ()
    return sizes.get(None, ())
