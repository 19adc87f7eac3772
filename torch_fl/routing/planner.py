"""Brings what is registered in line with the rules: resolve, plan each operator, register.

`apply()` after any change of the rule layers or flags; `replan(op)` for one
operator, which is what a failing kernel asks for (through the
`kernel_failed` callback handed to the policies) from inside its own call.
"""

from __future__ import annotations

import contextlib
import warnings

import torch

from torch_fl._core import _C
from torch_fl.backends import cpu_random
from torch_fl.routing import autograd_guard, kernels, native_only, policy, registry, rules
from torch_fl.routing.config import LAYER_RUNTIME, Rule, check_backend_name
from torch_fl.routing.state import LOCK, STATE, all_rules
from torch_fl.routing.types import OpRoute
from torch_fl.vocab.errors import FallbackWarning, RoutingError, shorten
from torch_fl.vocab.ops import parse_op_key


def _kernel_failed(op: str, backend: str, dtype: torch.dtype | None) -> None:
    """A backend kernel raised for `dtype`: from the next call on, that dtype runs natively."""
    with LOCK:
        STATE.failed.setdefault(op, set()).add((backend, dtype))
        replan(op)


def _keeps_kernel(op: str) -> bool:
    """Whether `op`'s PyRoute keeps a kernel of ours on the native route: a random operator on host backing
    once routed (a PyRoute's native state runs the C++ native route, which hands the CPU kernel no generator,
    so it would draw from the CPU's own; its native target draws from the flagos one, cpu_random.py)."""
    return cpu_random.host_native_kernel(op) is not None and _C.PyRoute(op).registered


def _apply_op(op: str, route: OpRoute | None, force: bool = False) -> None:
    if route is None and not _keeps_kernel(op):
        registry.remove(op)
        autograd_guard.set_routed(op, None)
        return
    plan = rules.plan_for(op, route or OpRoute(op, None), STATE.failed.get(op, ()), STATE.strict)
    if not plan.needs_kernel and not _keeps_kernel(op):
        registry.remove(op)  # the C++ native route takes over again
        autograd_guard.set_routed(op, None)
        return
    if registry.plan_of(op) == plan and not force:
        return
    autograd_guard.set_routed(op, policy.autograd_fallback(op, plan) if plan.needs_kernel else None)
    default, by_dtype, by_size, by_value = kernels.core_targets(op, plan, _kernel_failed)
    registry.install(op, plan, default, by_dtype, by_size, by_value)


def replan(op: str) -> None:
    """Plan and register `op` again from the resolved table (its failures and the flags may have changed)."""
    with LOCK:
        _apply_op(op, STATE.resolved.get(op) or OpRoute(op, None))
        registry.note_attention_routes()
        registry.note_native_graphs(STATE.log_dispatch)


def strict_problems(resolved: dict[str, OpRoute], notes: list[str]) -> list[str]:
    """What FLAGOS_STRICT=1 forbids in a resolved table: rules that can only fall back (an unavailable
    backend, an operator or dtype it lacks) and glob rules that apply to no operator."""
    problems = list(notes)
    for op, route in sorted(resolved.items()):
        sized = [(dt, rule) for dt, cs in route.by_size for _, rule in cs]
        sized += [
            (dt, rule)
            for dt, vcs in route.by_value
            for _, base, cs in vcs
            for rule in (base, *(r for _, r in cs))
            if rule is not None
        ]
        for dt, rule in ([(None, route.default)] if route.default is not None else []) + list(route.by_dtype) + sized:
            t = rules.target_for(op, rule, dt)
            if t.kind == "fallback":
                problems.append(f"{rule.source}: '{shorten(rule.written)}' would run natively instead: {t.reason}")
    return problems


def apply() -> None:
    """Resolve all layers and bring registrations in line with the result.

    Under FLAGOS_STRICT=1 a table with a route that can only fall back raises a RoutingError before
    anything is registered (at import for the file and the environment)."""
    with LOCK:
        resolved, notes = rules.resolve(all_rules())
        if STATE.strict:
            problems = strict_problems(resolved, notes)
            if problems:
                raise RoutingError(
                    "FLAGOS_STRICT=1 forbids falling back to native, but these routes cannot run where they "
                    "point:\n  " + "\n  ".join(problems) + "\nRoute them to a backend that runs them (or to "
                    "native), or unset FLAGOS_STRICT."
                )
        for note in notes:
            if note not in STATE.glob_notes:
                warnings.warn(f"flagos routing: {note}", FallbackWarning, stacklevel=3)
        STATE.glob_notes = notes
        stale = (set(registry.REGISTERED) | set(STATE.resolved)) - set(resolved)
        STATE.resolved = resolved
        for op in stale:
            _apply_op(op, None)
        for op, route in resolved.items():
            _apply_op(op, route)
        registry.note_attention_routes()
        registry.note_native_graphs(STATE.log_dispatch)


@contextlib.contextmanager
def changing():
    """A change of the rule layers or flags, undone if applying it raises (FLAGOS_STRICT=1's check runs
    before anything is registered, so the registrations are still the old table's)."""
    with LOCK:
        saved = (
            list(STATE.file_rules),
            list(STATE.env_rules),
            dict(STATE.runtime_rules),
            STATE.config_file,
            STATE.strict,
            STATE.runtime_order,
        )
        try:
            yield
        except BaseException:
            (STATE.file_rules, STATE.env_rules, STATE.runtime_rules, STATE.config_file, strict, order) = saved
            STATE.runtime_order = order
            if STATE.strict != strict:
                STATE.strict = strict
                _C._set_strict(strict)
            raise


def set_flags(log_dispatch=None, log_fallback=None, strict=None) -> None:
    """Change the log/strict flags (the env vars set them at import) and rebuild kernels."""
    with changing():
        if log_dispatch is not None:
            STATE.log_dispatch = bool(log_dispatch)
            _C._set_log_dispatch(STATE.log_dispatch)
        rebuild = log_fallback is not None and STATE.log_fallback != bool(log_fallback)
        if log_fallback is not None:
            STATE.log_fallback = bool(log_fallback)
            _C._set_log_fallback(STATE.log_fallback)
        if strict is not None:
            STATE.strict = bool(strict)
            _C._set_strict(STATE.strict)
        apply()
        if rebuild:  # kernels built with the flag (a random operator's cpu_fallback) again, plans unchanged
            for op in list(registry.REGISTERED):
                _apply_op(op, STATE.resolved.get(op) or OpRoute(op, None), force=True)


def set_runtime(op: str, backend: str | None) -> None:
    """The runtime layer's rule for `op` (`mm`, `mm[bfloat16]`): set, or dropped with None."""
    norm, dtype = parse_op_key(op)
    with changing():
        if backend is None:
            STATE.runtime_rules.pop((norm, dtype), None)
        else:
            check_backend_name(backend)
            problem = native_only.route_problem(norm, backend)
            if problem is not None:
                raise RoutingError(problem + ".")
            STATE.runtime_order += 1
            STATE.runtime_rules[(norm, dtype)] = Rule(
                norm, backend, dtype, layer=LAYER_RUNTIME, origin="runtime", order=STATE.runtime_order
            )
        # a new explicit route gives a failed backend another chance for this op
        STATE.failed.pop(norm, None)
        apply()
