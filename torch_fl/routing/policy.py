"""What a routed call does when its backend cannot run it: fall back, warn once, or raise.

Each rule is written once here: the dtype of a call (`call_dtype`), the
empty-input check (`guard_empty_inputs`), the strict error, the one warning
per (op, backend, dtype). The factories build closures when a route changes,
holding everything a call needs, so a call reads no flag, builds no dict and
formats no string until it actually falls back. A kernel failure is reported
through the `kernel_failed` callback the planner injects (it records the
failure and re-plans the operator); this module registers nothing.

The C++ kernel (torch_fl._C.PyRoute) applies the dtype and empty-input rules
itself before calling the backend function and hands such calls to the
closures made here.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from torch_fl.routing.state import STATE, counters_for
from torch_fl.routing.types import Counters, Plan, Target
from torch_fl.vocab import ops
from torch_fl.vocab.dtypes import dtype_name
from torch_fl.vocab.errors import FallbackWarning

#: kernel_failed(op, backend, dtype): a backend kernel raised for that dtype; later such calls run natively
KernelFailed = Callable[[str, str, "torch.dtype | None"], None]

# Text of errors that mean the device itself is in trouble: re-running elsewhere would hide them.
_DEVICE_FAULTS = ("CUDA error", "illegal memory access", "device-side assert", "CUBLAS_STATUS", "cudaError")
# PyTorch's error for a call whose tensors are on two devices (the route's own check raises it too): the caller's
# mistake, which every backend would refuse, not the kernel's failure.
_DEVICE_MISMATCH = "Expected all tensors to be on the same device"


@dataclass(frozen=True)
class Fallback:
    """Where a call routed to `backend` goes when it cannot run there: `run_native`, counted in
    `counters`, or an error under FLAGOS_STRICT=1 (`strict`)."""

    op: str
    backend: str  # as written
    run_native: Callable
    counters: Counters
    strict: bool


def call_dtype(args, kwargs) -> torch.dtype | None:
    """The dtype a call is routed by: its first tensor argument's (or first tensor list's first
    element), else a `dtype=` keyword, else None."""
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.dtype
        if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            return a[0].dtype
    d = kwargs.get("dtype")
    return d if isinstance(d, torch.dtype) else None


def guard_empty_inputs(op: str, kernel: Callable, on_empty: Callable) -> Callable:
    """`kernel`, except that calls with an empty input tensor (out= and in-place targets aside) go to `on_empty`."""
    positions, arg_names = ops.read_args(op)

    def empty(a) -> bool:
        if isinstance(a, torch.Tensor):
            return a.numel() == 0
        return isinstance(a, (list, tuple)) and any(isinstance(t, torch.Tensor) and t.numel() == 0 for t in a)

    def guarded(*args, **kwargs):
        if any(i in positions and empty(a) for i, a in enumerate(args)) or any(
            k in arg_names and empty(v) for k, v in kwargs.items()
        ):
            return on_empty(*args, **kwargs)
        return kernel(*args, **kwargs)

    return guarded


def strict_error(op: str, backend: str, why: str) -> RuntimeError:
    enc = op.replace(".", "__")
    return RuntimeError(
        f"flagos: {op} is routed to '{backend}' but {why}, and FLAGOS_STRICT=1 forbids falling back to native. "
        f"Route it elsewhere (FLAGOS_OP_{enc}=native, or set_route('{op}', 'native')) or unset FLAGOS_STRICT."
    )


def warn_once(op: str, backend: str, dtype, message: Callable[[], str]) -> None:
    """Warn once per (op, backend, dtype); `message()` builds the text only for that first warning."""
    key = (op, backend, dtype)
    if key in STATE.warned:
        return
    STATE.warned.add(key)
    warnings.warn(message(), FallbackWarning, stacklevel=4)


def fallback_for(fb: Fallback, reason: str) -> Callable:
    """A call whose target falls back (`reason`: why): native, warned once per dtype."""
    op, backend, run_native, counters, strict = fb.op, fb.backend, fb.run_native, fb.counters, fb.strict

    def fallback(*args, **kwargs):
        if strict:
            raise strict_error(op, backend, reason)
        counters[1] += 1
        dt = call_dtype(args, kwargs)
        warn_once(
            op,
            backend,
            dt,
            lambda: (
                f"flagos: {op} ({dtype_name(dt)}) routed to '{backend}' ran "
                f"natively instead: {reason}. Explain: python -m torch_fl explain {op}"
            ),
        )
        return run_native(*args, **kwargs)

    return fallback


def error_policy(fb: Fallback, mutable: bool, kernel_failed: KernelFailed) -> Callable:
    """`on_error(exc, args, kwargs)` for a backend kernel that raised: the call runs natively (not an
    in-place/out= one, which may have written already) and so do later calls of its dtype."""
    op, backend, run_native, counters, strict = fb.op, fb.backend, fb.run_native, fb.counters, fb.strict

    def on_error(e, args, kwargs):
        text = str(e)
        if _DEVICE_MISMATCH in text:
            raise e  # the route stays: the same call fails natively too
        counters[2] += 1
        if any(s in text for s in _DEVICE_FAULTS):
            raise e  # a device fault: the device state is suspect, running it again elsewhere would hide it
        dt = call_dtype(args, kwargs)
        why = f"its kernel raised {type(e).__name__}: {text.splitlines()[0] if text else ''}"
        if strict:
            raise strict_error(op, backend, why) from e
        kernel_failed(op, backend, dt)  # later calls of this dtype go straight to native
        warn_once(
            op,
            backend,
            dt,
            lambda: (
                f"flagos: {op} ({dtype_name(dt)}) on '{backend}': {why}; "
                f"this and later {dtype_name(dt)} calls run natively."
            ),
        )
        if mutable:
            raise RuntimeError(
                f"flagos: {op} on '{backend}' raised {type(e).__name__} ({text}). It is an in-place/out= operator "
                "that may already have written part of its output, so it is not re-run natively; later "
                f"{dtype_name(dt)} calls run natively. Route {op} to native to avoid this."
            ) from e
        counters[1] += 1
        return run_native(*args, **kwargs)

    return on_error


def bad_dtype_policy(fb: Fallback) -> Callable:
    """A call of a dtype the backend does not handle at all: native, warned once per dtype."""
    op, backend, run_native, counters, strict = fb.op, fb.backend, fb.run_native, fb.counters, fb.strict
    bad_reason = f"{backend} does not support that dtype"

    def bad_dtype(*args, **kwargs):
        dt = call_dtype(args, kwargs)
        if strict:
            raise strict_error(op, backend, f"{backend} does not support {dtype_name(dt)}")
        counters[1] += 1
        warn_once(
            op,
            backend,
            dt,
            lambda: f"flagos: {op} ({dtype_name(dt)}) routed to '{backend}' ran natively instead: {bad_reason}.",
        )
        return run_native(*args, **kwargs)

    return bad_dtype


def empty_input_policy(fb: Fallback, unsafe: str) -> Callable:
    """A call with an empty input tensor, for a backend that is not given those (`unsafe`: why): native."""
    op, backend, run_native, counters, strict = fb.op, fb.backend, fb.run_native, fb.counters, fb.strict
    why = f"an input tensor is empty and '{backend}' kernels are not given empty tensors"

    def on_empty(*args, **kwargs):
        if strict:
            raise strict_error(op, backend, why)
        counters[1] += 1
        warn_once(
            op,
            backend,
            "empty input",
            lambda: (
                f"flagos: {op} routed to '{backend}' ran natively for a call with an empty input: {why} "
                f"({unsafe}). Counted as a fallback; other calls use '{backend}'."
            ),
        )
        return run_native(*args, **kwargs)

    return on_empty


def autograd_fallback(op: str, plan: Plan) -> Callable:
    """What the autograd guard does when a call of a routed op needs a gradient and runs as its decomposition."""
    strict = plan.strict

    def accounting(t: Target):
        # None for a native target: its decomposition is simply what native does.
        return None if t.kind == "native" else (t.backend, counters_for(op, t.backend))

    per_dtype = {d: accounting(t) for d, t in plan.by_dtype}
    other = accounting(plan.default)

    def why(backend: str) -> str:
        return f"it needs a gradient, which PyTorch gets by decomposing {op}, and '{backend}' has no backward for it"

    def on_fallback(args, kwargs):
        dt = call_dtype(args, kwargs)
        hit = per_dtype.get(dt, other)
        if hit is None:
            return
        backend, counters = hit
        if strict:
            raise strict_error(op, backend, why(backend))
        counters[1] += 1
        warn_once(
            op,
            backend,
            dt,
            lambda: (
                f"flagos: {op} ({dtype_name(dt)}) routed to '{backend}' ran as PyTorch's decomposition: "
                f"{why(backend)}. Its parts run as routed; calls without gradients use '{backend}'."
            ),
        )

    return on_fallback
