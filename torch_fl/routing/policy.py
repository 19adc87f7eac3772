"""What a routed call does when its target cannot run it: fall back, warn once, or raise.

The C++ kernel of a routed operator (_C.PyRoute) decides which
target a call takes (by the call's dtype) and whether an input is empty; the
callables made here decide what follows, given that dtype: a notice before a
call runs natively (counted, warned once per (op, backend, dtype), or the
strict error), and the policy for a backend kernel that raised. They are
built when a route changes, holding everything a call needs, so a call reads
no flag, builds no dict and formats no string until it actually falls back.
A kernel failure is reported through the `kernel_failed` callback the planner
injects (it records the failure and re-plans the operator); this module
registers nothing.
"""

from __future__ import annotations

import signal
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from torch_fl._core import _C
from torch_fl.backends.call_checks import rejected_by_meta
from torch_fl.routing.state import STATE, counters_for
from torch_fl.routing.types import Counters, Plan, Target
from torch_fl.vocab import ops
from torch_fl.vocab.dtypes import dtype_name
from torch_fl.vocab.errors import FallbackWarning, KernelRefused

#: kernel_failed(op, backend, dtype): a backend kernel raised for that dtype; later such calls run natively
KernelFailed = Callable[[str, str, "torch.dtype | None"], None]

# Text of errors that mean the device itself is in trouble: re-running elsewhere would hide them.
_DEVICE_FAULTS = ("CUDA error", "illegal memory access", "device-side assert", "CUBLAS_STATUS", "cudaError")


def device_fault(e: BaseException) -> bool:
    """Whether `e` says the device itself is in trouble (a kernel's illegal memory access leaves the CUDA
    context unusable): never a fallback or a measurement, always the caller's error."""
    accelerator_error = getattr(torch, "AcceleratorError", None)
    if isinstance(accelerator_error, type) and isinstance(e, accelerator_error):
        return True
    text = str(e)
    return any(s in text for s in _DEVICE_FAULTS)


@dataclass(frozen=True)
class Fallback:
    """A call routed to `backend` that runs natively instead: counted in `counters`, or an error under
    FLAGOS_STRICT=1 (`strict`)."""

    op: str
    backend: str  # as written
    counters: Counters
    strict: bool


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


def _notice(fb: Fallback, why: str, per_dtype: bool, message: Callable) -> Callable:
    """notice(dtype) before a call runs natively instead of on `fb.backend` (`why`): the strict error, or a
    counted fallback warned once per dtype (`per_dtype`) or once per (op, backend); `message(dtype)` is built
    only for that first warning."""
    op, backend, counters, strict = fb.op, fb.backend, fb.counters, fb.strict

    def notice(dt):
        if strict:
            raise strict_error(op, backend, why)
        counters[1] += 1
        warn_once(op, backend, dt if per_dtype else "empty input", lambda: message(dt))

    return notice


def fallback_notice(fb: Fallback, reason: str) -> Callable:
    """notice(dtype) for a call whose target falls back (`reason`: why): counted, warned once per dtype."""
    op, backend = fb.op, fb.backend
    return _notice(
        fb,
        reason,
        True,
        lambda dt: (
            f"flagos: {op} ({dtype_name(dt)}) routed to '{backend}' ran natively instead: {reason}. "
            f"Explain: python -m torch_fl explain {op}"
        ),
    )


def empty_input_notice(fb: Fallback, unsafe: str) -> Callable:
    """notice(dtype) for a call with an empty input, for a backend that is not given those (`unsafe`: why)."""
    op, backend = fb.op, fb.backend
    why = f"an input tensor is empty and '{backend}' kernels are not given empty tensors"
    return _notice(
        fb,
        why,
        False,
        lambda dt: (
            f"flagos: {op} routed to '{backend}' ran natively for a call with an empty input: {why} "
            f"({unsafe}). Counted as a fallback; other calls use '{backend}'."
        ),
    )


def _signal_handler_codes() -> set:
    """The code objects of the Python signal handlers installed now."""
    codes = set()
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
        code = getattr(handler, "__code__", None) or getattr(getattr(handler, "__func__", None), "__code__", None)
        if code is not None:
            codes.add(code)
    return codes


def from_signal_handler(e: BaseException) -> bool:
    """True when `e` was raised by a Python signal handler that ran during the kernel (a SIGALRM timeout)."""
    codes = _signal_handler_codes()
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in codes:
            return True
        tb = tb.tb_next
    return False


def error_policy(fb: Fallback, mutable: bool, run_native: Callable, kernel_failed: KernelFailed) -> Callable:
    """`on_error(exc, dtype, args, kwargs)` for a backend kernel that raised.

    Only a defect of the backend demotes its route: the native route decides.
    A functional call runs natively: if that raises too, the caller made the
    mistake (a shape, an index, an out= dtype), and the native error
    propagates unchanged, the route kept; if it runs, its result is returned
    and later calls of that dtype run natively. An in-place/out= call may
    have written already, so it is only checked natively (on meta tensors)
    and never re-run after a backend defect, unless the backend refused it
    before any kernel ran (KernelRefused). BaseExceptions (KeyboardInterrupt,
    SystemExit), exceptions raised by a signal handler during the call, and
    device faults propagate as they are and demote nothing.
    """
    op, backend, counters, strict = fb.op, fb.backend, fb.counters, fb.strict

    def demote(e, dt, why) -> None:
        counters[2] += 1
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

    def on_error(e, dt, args, kwargs):
        if not isinstance(e, Exception) or from_signal_handler(e):
            raise e
        text = str(e)
        if device_fault(e):
            counters[2] += 1
            raise e  # a device fault: the device state is suspect, running it again elsewhere would hide it
        why = f"its kernel raised {type(e).__name__}: {text.splitlines()[0] if text else ''}"
        if mutable:
            if rejected_by_meta(op, args, kwargs):
                return run_native(*args, **kwargs)  # the caller's error: the native route raises it, writing nothing
            if isinstance(e, KernelRefused):  # refused before any kernel ran: nothing was written, run it natively
                result = run_native(*args, **kwargs)
                demote(e, dt, why)
                counters[1] += 1
                return result
            demote(e, dt, why)
            raise RuntimeError(
                f"flagos: {op} on '{backend}' raised {type(e).__name__} ({text}). It is an in-place/out= operator "
                "that may already have written part of its output, so it is not re-run natively; later "
                f"{dtype_name(dt)} calls run natively. Route {op} to native to avoid this."
            ) from e
        result = run_native(*args, **kwargs)  # raises the native error if the call itself is wrong
        demote(e, dt, why)
        counters[1] += 1
        return result

    return on_error


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

    name, overload = ops.split(op)

    def on_fallback(args, kwargs):
        dt = _C._call_dtype(name, overload, *args, **kwargs)
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
