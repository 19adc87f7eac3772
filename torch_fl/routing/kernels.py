"""An operator's kernel for its plan: the Python kernel, or the arguments of a C++ PyRoute.

Built when the route changes, from the policy closures (policy.py), so that a
call runs only what its plan needs: no flag read, no dict built, no string
formatted unless the dispatch log is on.

A plan whose default target is a backend function that takes native aliases
(FlagGems), with every per-dtype entry native or falling back, runs in C++
(torch_fl._C.PyRoute calls the function itself; `pyroute_args`). Any other
non-native plan gets a Python kernel (`python_kernel`); there a native-alias
function is called through torch_fl._C.OnNative, the only place routing wraps one.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import torch

import torch_fl
from torch_fl import backends
from torch_fl.routing.policy import (
    Fallback,
    KernelFailed,
    bad_dtype_policy,
    call_dtype,
    empty_input_policy,
    error_policy,
    fallback_for,
    guard_empty_inputs,
)
from torch_fl.routing.state import counters_for
from torch_fl.routing.types import Plan, PyRouteArgs, Target
from torch_fl.vocab import ops


def native_runner(op: str) -> Callable:
    """The native route of `op` as a Python callable on flagos arguments (the CPU fallback where the backing
    device has no kernel for it)."""
    name, overload = ops.split(op)
    key = "CUDA" if torch_fl.backing() == "cuda" else "CPU"
    if torch._C._dispatch_has_computed_kernel_for_dispatch_key(ops.qualified(op), key):
        return functools.partial(torch_fl._C._run_native, name, overload)
    return functools.partial(torch_fl._C._run_cpu_fallback, name, overload)


def _log_dispatch(inner: Callable, op: str, backend: str) -> Callable:
    """`inner`, printing `[flagos dispatch] <op> -> <backend>` first (built only while the log is on)."""
    line = f"[flagos dispatch] {op} -> {backend}\n"

    def logged(*args, **kwargs):
        sys.stderr.write(line)
        sys.stderr.flush()
        return inner(*args, **kwargs)

    return logged


def _backend_kernel(fb: Fallback, mutable: bool, kernel_failed: KernelFailed) -> Callable:
    """A Python kernel that calls the backend's function for `fb.op`, with its dtype, error and empty-input policies."""
    op, counters = fb.op, fb.counters
    b = backends.get(fb.backend)
    bk = b.kernel(op)
    fn = torch_fl._C.OnNative(bk.fn) if bk.on_native else bk.fn
    counted_by_core = bk.counted_by_core
    bad_dtypes = b.unsupported_dtypes()
    on_error = error_policy(fb, mutable, kernel_failed)

    if bad_dtypes:
        bad_dtype = bad_dtype_policy(fb)

        def kernel(*args, **kwargs):
            if call_dtype(args, kwargs) in bad_dtypes:
                return bad_dtype(*args, **kwargs)
            if not counted_by_core:
                counters[0] += 1
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001
                return on_error(e, args, kwargs)

    elif counted_by_core:

        def kernel(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001
                return on_error(e, args, kwargs)

    else:

        def kernel(*args, **kwargs):
            counters[0] += 1
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001
                return on_error(e, args, kwargs)

    if b.empty_inputs_unsafe:
        kernel = guard_empty_inputs(op, kernel, empty_input_policy(fb, b.empty_inputs_unsafe))
    return kernel


def _target_callable(
    op: str, target: Target, run_native: Callable, mutable: bool, strict: bool, kernel_failed: KernelFailed
) -> Callable:
    """The callable for one target, without logging."""
    if target.kind == "native":
        return run_native
    fb = Fallback(op, target.backend, run_native, counters_for(op, target.backend), strict)
    if target.kind == "fallback":
        return fallback_for(fb, target.reason)
    return _backend_kernel(fb, mutable, kernel_failed)


def python_kernel(op: str, plan: Plan, kernel_failed: KernelFailed) -> Callable:
    """The Python kernel of `op` for `plan`: the default target's callable, or a switch on the call's dtype."""
    run_native = native_runner(op)
    mutable = ops.is_mutable(op)

    def one(t: Target) -> Callable:
        k = _target_callable(op, t, run_native, mutable, plan.strict, kernel_failed)
        return _log_dispatch(k, op, t.backend) if plan.log_dispatch else k

    first = one(plan.default)
    if not plan.by_dtype:
        return first
    table = {d: one(t) for d, t in plan.by_dtype}
    get = table.get

    def by_dtype(*args, **kwargs):
        return get(call_dtype(args, kwargs), first)(*args, **kwargs)

    return by_dtype


def pyroute_args(op: str, plan: Plan, kernel_failed: KernelFailed) -> PyRouteArgs | None:
    """What torch_fl._C.PyRoute runs `plan` with, or None when the plan needs the Python kernel.

    Eligible: the default target is a backend function on native aliases
    (FlagGems) and every per-dtype entry runs natively or falls back (what a
    kernel failure adds); those dtypes, and the ones the backend lacks, go to
    `other_dtype`.
    """
    default = plan.default
    if default.kind != "kernel" or any(t.kind == "kernel" for _, t in plan.by_dtype):
        return None
    b = backends.get(default.backend)
    bk = b.kernel(op)
    if not bk.on_native or bk.counted_by_core:
        return None
    run_native = native_runner(op)
    mutable = ops.is_mutable(op)
    fb = Fallback(op, default.backend, run_native, counters_for(op, default.backend), plan.strict)
    bad_dtype = bad_dtype_policy(fb)
    per_dtype = {d: _target_callable(op, t, run_native, mutable, plan.strict, kernel_failed) for d, t in plan.by_dtype}
    get = per_dtype.get

    def other_dtype(*args, **kwargs):
        return get(call_dtype(args, kwargs), bad_dtype)(*args, **kwargs)

    other = sorted(b.unsupported_dtypes() | set(per_dtype), key=str)
    on_empty = empty_input_policy(fb, b.empty_inputs_unsafe) if b.empty_inputs_unsafe else None
    return PyRouteArgs(bk.fn, error_policy(fb, mutable, kernel_failed), other_dtype, other, on_empty, fb.counters)
