"""An operator's plan as the C++ kernel runs it: one CoreTarget per target, per dtype.

Every routed operator runs in C++ (_C.PyRoute): it finds a call's
dtype and whether an input is empty, then runs the target the plan gives that
dtype. Built when the route changes, from the policy callables (policy.py),
so that a call runs only what its target needs: no flag read, no dict built,
no string formatted unless the dispatch log is on.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import torch

from torch_fl import backends
from torch_fl._core import _C, backing
from torch_fl.backends import cpu_random
from torch_fl.routing.policy import (
    Fallback,
    KernelFailed,
    empty_input_notice,
    error_policy,
    fallback_notice,
)
from torch_fl.routing.state import STATE, counters_for
from torch_fl.routing.types import CoreTarget, Plan, Target
from torch_fl.vocab import ops
from torch_fl.vocab.dtypes import dtype_name


def native_runner(op: str) -> Callable:
    """The native route of `op` as a Python callable on flagos arguments (logged and counted as the route)."""
    return functools.partial(_C._run_native, *ops.split(op))


def _reraise(exc, dtype, args, kwargs):
    """A CPU kernel's error (a random operator's cpu_fallback or host native route) is the caller's to see, as
    on the C++ routes."""
    raise exc


def _logging_fallback(fn: Callable, line: str) -> Callable:
    """`fn` printing FLAGOS_LOG_FALLBACK's line first (built when the route is planned with the flag on)."""

    def logged(*args, **kwargs):
        sys.stderr.write(line)
        sys.stderr.flush()
        return fn(*args, **kwargs)

    return logged


def _first_dtype(args: tuple, kwargs: dict) -> torch.dtype | None:
    """The dtype a call is routed by (its first tensor argument's), from its Python arguments."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            return a.dtype
    return None


def _noticed(notice: Callable, fn: Callable) -> Callable:
    """`fn` after a fallback's notice (which counts, warns once or raises under FLAGOS_STRICT=1)."""

    def fallback(*args, **kwargs):
        notice(_first_dtype(args, kwargs))
        return fn(*args, **kwargs)

    return fallback


def _core_target(op: str, target: Target, strict: bool, kernel_failed: KernelFailed) -> CoreTarget:
    native = backends.log_name(backing())
    # A random operator's native route on host backing as a kernel of ours (cpu_random.py): a PyRoute's C++
    # native route would hand its CPU kernel no generator. None elsewhere.
    keep = cpu_random.host_native_kernel(op)
    if target.kind == "native":
        if keep is None:
            return CoreTarget("native", native)
        return CoreTarget("kernel", native, keep, _reraise, None, counters_for(op, target.backend))
    fb = Fallback(op, target.backend, counters_for(op, target.backend), strict)
    if target.kind == "fallback":
        notice = fallback_notice(fb, target.reason)
        if keep is None:
            return CoreTarget("fallback", native, notice=notice)
        return CoreTarget("kernel", native, _noticed(notice, keep), _reraise, None, counters_for(op, "native"))
    b = backends.get(target.backend)
    label = backends.log_name(target.backend)
    if b.core_route == "cpu_fallback":
        # Random operators draw from the flagos generator in a kernel of their own (decided here, once per
        # operator); the others take the C++ fallback, as before.
        draws = cpu_random.random_kernel(op)
        if draws is None:
            return CoreTarget("cpu_fallback", label)
        if STATE.log_fallback:
            draws = _logging_fallback(draws, f"[flagos cpu_fallback] aten::{op}\n")
        return CoreTarget("kernel", label, draws, _reraise, None, fb.counters)
    on_empty = empty_input_notice(fb, b.empty_inputs_unsafe) if b.empty_inputs_unsafe else None
    on_error = error_policy(fb, ops.is_mutable(op), native_runner(op), kernel_failed)
    return CoreTarget("kernel", label, b.kernel(op).fn, on_error, on_empty, fb.counters, replay=b.replay)


def _for_dtype(t: Target, dtype: torch.dtype) -> Target:
    """`t` for calls of `dtype`: a fallback where t's backend does not handle that dtype at all."""
    if t.kind == "kernel" and dtype in backends.get(t.backend).unsupported_dtypes():
        return Target("fallback", t.backend, f"{t.backend} does not support {dtype_name(dtype)}")
    return t


def core_targets(op: str, plan: Plan, kernel_failed: KernelFailed) -> tuple[CoreTarget, tuple, tuple, tuple]:
    """The default CoreTarget of `plan`, those of its dtypes, of its size classes and of its value classes: the
    plan's own, and a fallback for each dtype a backend of the dtype-less targets does not handle at all."""

    def core(t: Target) -> CoreTarget:
        return _core_target(op, t, plan.strict, kernel_failed)

    default = core(plan.default)
    by_dtype = [(d, core(t)) for d, t in plan.by_dtype]
    known = {d for d, _ in plan.by_dtype}
    if plan.default.kind == "kernel":
        for d in sorted(backends.get(plan.default.backend).unsupported_dtypes() - known, key=str):
            by_dtype.append((d, core(_for_dtype(plan.default, d))))
    sizes = dict(plan.by_size)
    by_size = [(d, [(n, core(t)) for n, t in cs]) for d, cs in plan.by_size]
    any_dtype = sizes.get(None, ())
    # A dtype with a target of its own takes no dtype-less size classes in the core: give the dtypes added
    # above, and those a size class's backend lacks, theirs here.
    lacking = {d for d, _ in by_dtype} - known
    for _, t in any_dtype:
        if t.kind == "kernel":
            lacking |= backends.get(t.backend).unsupported_dtypes() - known
    any_values = dict(plan.by_value).get(None, ())
    for _, base, cs in any_values:
        for t in (base, *(t for _, t in cs)):
            if t.kind == "kernel":
                lacking |= backends.get(t.backend).unsupported_dtypes() - known
    for d in sorted(lacking - set(sizes), key=str):
        by_size.append((d, [(n, core(_for_dtype(t, d))) for n, t in any_dtype]))

    def value_core(d, vcs) -> tuple:
        def as_dtype(t: Target) -> CoreTarget:
            return core(t if d is None else _for_dtype(t, d))

        return d, [(v, as_dtype(b), [(n, as_dtype(t)) for n, t in cs]) for v, b, cs in vcs]

    by_value = [value_core(d, vcs) for d, vcs in plan.by_value]
    # As for sizes: a dtype given a target above takes the dtype-less value classes as that dtype runs them.
    by_value += [value_core(d, any_values) for d in sorted(lacking - set(dict(plan.by_value)), key=str) if any_values]
    return default, tuple(by_dtype), tuple((d, cs) for d, cs in by_size if cs), tuple(by_value)
