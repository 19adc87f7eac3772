"""From rules to what runs: per-operator routes, their targets, an operator's plan.

Pure functions of their arguments (and of which backends are available and
what the core implements): no routing state is read or changed here and
nothing is registered with PyTorch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

import torch

from torch_fl import backends
from torch_fl._core import backing
from torch_fl.routing import native_only
from torch_fl.routing.conditions import NO_VALUE, values_equal
from torch_fl.routing.config import Rule
from torch_fl.routing.types import OpRoute, Plan, Target
from torch_fl.vocab import ops
from torch_fl.vocab.dtypes import dtype_name
from torch_fl.vocab.errors import RoutingError, shorten

#: (backend, dtype or None for every dtype) whose kernel raised for an operator
Failures = Collection[tuple[str, torch.dtype | None]]


def core_op(op: str) -> bool:
    """True for operators only native routes may run: those the flagos core implements itself (empty,
    view, set_, ...), those the CPU fallback and device transfers run through (_to_copy, copy_, ...) and
    the view operators (routing/native_only.py)."""
    return native_only.is_native_only(op)


def glob_targets(rule: Rule) -> list[str]:
    """The operators a glob rule applies to: those it matches that its backend can run (and, for a
    dtype rule, that have a tensor argument whose dtype can select it)."""
    matched = ops.matching(rule.pattern)
    if rule.dtype is not None:
        matched = [op for op in matched if ops.has_tensor_args(op)]
    b = backends.get(rule.backend)
    if b.native:
        return matched
    if not b.available():
        return []
    return [op for op in matched if b.supports_op(op) and not core_op(op)]


def glob_skip_reason(rule: Rule, op: str) -> str:
    """Why glob `rule` does not apply to `op`, an operator it matches (not in glob_targets(rule))."""
    b = backends.get(rule.backend)
    if rule.dtype is not None and not ops.has_tensor_args(op):
        return f"aten::{op} has no tensor argument, so a dtype rule cannot select its calls"
    if not b.available():
        return b.unavailable_reason() or f"{rule.backend} is unavailable"
    if core_op(op):
        return f"{native_only.reason(op)}; globs leave it on the native route"
    return f"{rule.backend} has no kernel for {op}"


def skipped_native_only(rule: Rule) -> list[str]:
    """The operators glob `rule` matches and its backend has, left on the native route (native_only.py)."""
    b = backends.get(rule.backend)
    if b.native or not b.available():
        return []
    return [op for op in ops.matching(rule.pattern) if core_op(op) and b.supports_op(op)]


def _runs(backend: str, op: str) -> bool:
    """Whether `backend` has a kernel of its own for `op` that `op` may take (no fallback, no error)."""
    b = backends.get(backend)
    return b.native or (b.available() and b.supports_op(op) and not core_op(op))


def with_out_overloads(rules: list[Rule]) -> list[Rule]:
    """`rules` and, for each rule naming a functional overload, the same rule for its out= overloads (`mm` ->
    `mm.out`, what compiled code calls for a matmul) that no rule names themselves and its backend runs."""
    named = {r.pattern for r in rules if not r.is_glob}
    derived = [
        dataclasses.replace(r, pattern=out, via=r.pattern)
        for r in rules
        if not r.is_glob and r.via is None
        for out in ops.out_overloads(r.pattern)
        if out not in named and _runs(r.backend, out)
    ]
    return [*rules, *derived] if derived else rules


def resolve(rules: list[Rule]) -> tuple[dict[str, OpRoute], list[str]]:
    """Per operator, the winning dtype-less rule and the winning per-dtype rules; notes on globs that apply nowhere."""
    per_op: dict[str, list[Rule]] = {}
    notes: list[str] = []
    for r in rules:
        if r.is_glob:
            targets = glob_targets(r)
            if not targets:
                b = backends.get(r.backend)
                why = b.unavailable_reason() or f"{r.backend} has none of the operators it matches"
                notes.append(f"{r.source}: '{shorten(r.written)}' applies to no operator: {why}")
            skipped = skipped_native_only(r)
            if skipped:
                notes.append(
                    f"{r.source}: '{shorten(r.written)}' leaves {len(skipped)} operator(s) on the native route, which "
                    f"the flagos core and the CPU fallback need there: {', '.join(skipped)}"
                )
            for op in targets:
                per_op.setdefault(op, []).append(r)
        else:
            per_op.setdefault(r.pattern, []).append(r)
    out: dict[str, OpRoute] = {}
    for op, rs in per_op.items():
        default = _winner(rs, None, None)
        by_dtype = []
        dtypes = sorted({r.dtype for r in rs if r.dtype is not None}, key=str)
        for dt in dtypes:
            best = _winner(rs, dt, None)
            if best is not default:
                by_dtype.append((dt, best))
        by_size = []
        if any(r.min_numel is not None for r in rs):
            bases = {None: default, **dict(by_dtype)}
            for dt in [None, *dtypes]:
                classes = size_classes(rs, dt, bases.get(dt, default))
                if classes:
                    by_size.append((dt, classes))
        arg, by_value = value_classes(op, rs, [None, *dtypes], {None: default, **dict(by_dtype)}, dict(by_size))
        out[op] = OpRoute(op, default, tuple(by_dtype), tuple(by_size), arg, by_value)
    return out, notes


def _winner(rs: list[Rule], dtype: torch.dtype | None, numel: int | None, value: object = NO_VALUE) -> Rule | None:
    """The most specific of `rs` that applies to a call of `dtype` with `numel` elements (None: any size) whose
    condition argument is `value`."""
    applicable = [r for r in rs if r.applies(dtype, numel, value)]
    return max(applicable, key=Rule.specificity) if applicable else None


def size_classes(
    rs: list[Rule], dtype: torch.dtype | None, base: Rule | None, value: object = NO_VALUE
) -> tuple[tuple[int, Rule], ...]:
    """An operator's size classes for `dtype` (None: dtype-less rules only) and condition argument `value`:
    (min_numel, rule) where the winning rule changes as the first tensor grows, `base` winning below every
    threshold."""
    out: list[tuple[int, Rule]] = []
    prev = base
    sizes = {r.min_numel for r in rs if r.min_numel is not None and r.applies(dtype, r.min_numel, value)}
    for t in sorted(sizes):
        win = _winner(rs, dtype, t, value)
        if win is not prev:
            out.append((t, win))
            prev = win
    return tuple(out)


def value_classes(op: str, rs: list[Rule], dtypes: list, bases: dict, sizes: dict) -> tuple[str | None, tuple]:
    """The argument an operator's argument rules test, and per dtype (None: dtype-less rules) its value classes:
    (value, rule below every threshold, size classes) for each value whose calls route otherwise than the
    dtype's other calls. ((None, ()) without argument rules.)"""
    named = [r for r in rs if r.arg is not None]
    if not named:
        return None, ()
    names = {r.arg[0] for r in named}
    if len(names) > 1:  # a routing file is checked for this when it is read (config._argument_problem)
        raise RoutingError(f"{op}'s rules test {sorted(names)}: the rules of one operator may test one argument")
    values: list = []
    for r in named:
        if not any(values_equal(r.arg[1], v) for v in values):
            values.append(r.arg[1])
    out = []
    for dt in dtypes:
        base = bases.get(dt, bases[None])
        plain = (base, sizes.get(dt, ()))
        if dt is not None and dt not in sizes and dt not in bases:
            plain = (base, sizes.get(None, ()))
        classes = []
        for v in values:
            vbase = _winner(rs, dt, None, v)
            vsizes = size_classes(rs, dt, vbase, v)
            if (vbase, vsizes) != plain:
                classes.append((v, vbase, vsizes))
        if classes:
            out.append((dt, tuple(classes)))
    return names.pop(), tuple(out)


def target_for(op: str, rule: Rule | None, dtype: torch.dtype | None, failed: Failures = ()) -> Target:
    """What runs for `op` under `rule` for `dtype` (None: any), given the kernels that `failed` for it."""
    if rule is None:
        return Target("native", backing())
    b = backends.get(rule.backend)
    reason = b.unavailable_reason()
    if reason is None and not b.native:
        if core_op(op):
            reason = f"{native_only.reason(op)}, so it is not routable"
        elif not b.supports_op(op):
            reason = f"{rule.backend} has no kernel for {op}"
        elif dtype is not None and not b.supports_dtype(op, dtype):
            reason = f"{rule.backend} does not support {dtype_name(dtype)}"
        elif (rule.backend, dtype) in failed or (rule.backend, None) in failed:
            reason = f"{rule.backend}'s kernel for {op} raised for {dtype_name(dtype)} earlier in this process"
    if reason is not None:
        if not b.available():
            reason = f"backend '{rule.backend}' is unavailable: {reason}"
        return Target("fallback", rule.backend, reason)
    return Target("native" if b.native else "kernel", rule.backend)


def plan_for(op: str, route: OpRoute, failed: Failures, strict: bool) -> Plan:
    """The plan of `op`'s kernel: its targets per dtype, with the flags the kernel is built for."""
    failures = tuple(sorted((b, str(d)) for b, d in failed))
    default = target_for(op, route.default, None, failed)
    by = tuple((d, target_for(op, r, d, failed)) for d, r in route.by_dtype)
    # a kernel failure for one dtype adds a dtype entry that falls back
    known = {d for d, _ in by}
    failed_dtypes = sorted({d for _, d in failed if d is not None and d not in known}, key=str)
    by += tuple((d, target_for(op, route.default, d, failed)) for d in failed_dtypes)
    sizes = tuple((d, tuple((n, target_for(op, r, d, failed)) for n, r in cs)) for d, cs in route.by_size)
    values = tuple(
        (d, tuple((v, target_for(op, r, d, failed), tuple((n, target_for(op, sr, d, failed)) for n, sr in cs))
                  for v, r, cs in vcs))
        for d, vcs in route.by_value
    )  # fmt: skip
    return Plan(default, by, failures, strict, sizes, route.arg, values)
