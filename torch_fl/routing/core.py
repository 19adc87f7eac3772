"""The resolved routing table and the kernels registered for it.

Rules come in three layers (file < env < runtime). Resolving them gives, per
operator, a default rule and optional per-dtype rules. An operator whose
routes are all native gets no kernel of ours: the C++ native route runs it and
only its dispatch-log label is set. An operator routed to FlagGems (other
dtypes native or falling back) gets a C++ kernel, `torch_fl._C.PyRoute`, that
calls the FlagGems function itself. Any other operator gets one Python
kernel, registered once at PrivateUse1 through its own `torch.library.Library`
as a trampoline to a cell. Either is registered once and a later plan of the
same kind swaps its state (torch 2.11 refuses a second Python kernel for the
same op and key, and a failing kernel re-plans its own operator while it
runs); a route back to native removes it and the C++ native route takes over.

The kernel is assembled when the route changes, from closures that already
hold everything a call needs (the backend function, the counter cell, the log
line), so a call reads no policy, builds no dict and formats no string unless
the dispatch log is on.
"""

from __future__ import annotations

import functools
import sys
import threading
import warnings
from array import array
from dataclasses import dataclass

import torch

import torch_fl
from torch_fl import backends
from torch_fl.routing import autograd_guard, names
from torch_fl.routing.config import LAYER_RUNTIME, Rule
from torch_fl.routing.errors import FallbackWarning, RoutingError

_lock = threading.RLock()


# ----------------------------------------------------------------- state
class _State:
    def __init__(self):
        self.file_rules: list[Rule] = []
        self.env_rules: list[Rule] = []
        self.runtime_rules: dict[tuple[str, torch.dtype | None], Rule] = {}
        self.config_file: str | None = None
        self.log_dispatch = False
        self.log_fallback = False
        self.strict = False
        self.runtime_order = 0
        # op -> (plan, Library, kernel cell) for ops with a Python kernel
        self.libs: dict[str, tuple[tuple, torch.library.Library, list]] = {}
        self.labels: dict[str, str] = {}  # op -> native dispatch-log label we set
        # (op, stats backend) -> array('q', [calls, fallbacks, failures]); a C++ route counts its calls
        # in cell[0] through the array's buffer (torch_fl._C.PyRoute), Python kernels count here
        self.cells: dict[tuple[str, str], array] = {}
        self.warned: set[tuple[str, str, torch.dtype | None]] = set()
        self.failed: dict[str, set[tuple[str, torch.dtype | None]]] = {}  # op -> {(backend, dtype)}
        self.glob_notes: list[str] = []
        self.resolved: dict[str, OpRoute] = {}


STATE = _State()


@dataclass(frozen=True)
class OpRoute:
    op: str
    default: Rule | None  # None: no dtype-less rule, the platform's native route
    by_dtype: tuple[tuple[torch.dtype, Rule], ...] = ()


@dataclass(frozen=True)
class Target:
    """What runs for one (op, rule, dtype): native, a backend kernel, or a fallback to native."""

    kind: str  # "native" | "kernel" | "fallback"
    backend: str  # as written
    reason: str | None = None


# ------------------------------------------------------------- resolution
def all_rules() -> list[Rule]:
    return [*STATE.file_rules, *STATE.env_rules, *STATE.runtime_rules.values()]


def _glob_targets(rule: Rule) -> list[str]:
    """The operators a glob rule applies to: those it matches that its backend can run."""
    matched = names.matching(rule.pattern)
    b = backends.get(rule.backend)
    if b.native:
        return matched
    if not b.available():
        return []
    return [op for op in matched if b.supports_op(op) and not core_op(op)]


def resolve(rules: list[Rule]) -> tuple[dict[str, OpRoute], list[str]]:
    """Per operator, the winning dtype-less rule and the winning per-dtype rules."""
    per_op: dict[str, list[Rule]] = {}
    notes: list[str] = []
    for r in rules:
        if r.is_glob:
            targets = _glob_targets(r)
            if not targets:
                b = backends.get(r.backend)
                why = b.unavailable_reason() or f"{r.backend} has none of the operators it matches"
                notes.append(f"{r.source}: '{r.written}' applies to no operator: {why}")
            for op in targets:
                per_op.setdefault(op, []).append(r)
        else:
            per_op.setdefault(r.pattern, []).append(r)
    out: dict[str, OpRoute] = {}
    for op, rs in per_op.items():
        plain = [r for r in rs if r.dtype is None]
        default = max(plain, key=Rule.specificity) if plain else None
        by_dtype = []
        for dt in sorted({r.dtype for r in rs if r.dtype is not None}, key=str):
            best = max((r for r in rs if r.dtype in (None, dt)), key=Rule.specificity)
            if best is not default:
                by_dtype.append((dt, best))
        out[op] = OpRoute(op, default, tuple(by_dtype))
    return out, notes


@functools.cache
def core_op(op: str) -> bool:
    """True for operators the flagos core implements itself (empty, view, set_, copy...): not routable."""
    q = names.qualified(op)
    if not torch._C._dispatch_has_kernel_for_dispatch_key(q, "PrivateUse1"):
        return False
    for line in torch._C._dispatch_dump(q).splitlines():
        if line.startswith("PrivateUse1:"):
            return "torch_fl/csrc/" in line and "native_route.cpp" not in line
    return False


def target_for(op: str, rule: Rule | None, dtype: torch.dtype | None) -> Target:
    if rule is None:
        return Target("native", torch_fl.backing())
    b = backends.get(rule.backend)
    reason = b.unavailable_reason()
    if reason is None and not b.native:
        if core_op(op):
            reason = f"aten::{op} is implemented by the flagos core itself and is not routable"
        elif not b.supports_op(op):
            reason = f"{rule.backend} has no kernel for {op}"
        elif dtype is not None and not b.supports_dtype(op, dtype):
            reason = f"{rule.backend} does not support {names.dtype_name(dtype)}"
        elif (rule.backend, dtype) in STATE.failed.get(op, ()) or (rule.backend, None) in STATE.failed.get(op, ()):
            reason = f"{rule.backend}'s kernel for {op} raised for {names.dtype_name(dtype)} earlier in this process"
    if reason is not None:
        if not b.available():
            reason = f"backend '{rule.backend}' is unavailable: {reason}"
        return Target("fallback", rule.backend, reason)
    return Target("native" if b.native else "kernel", rule.backend)


# ---------------------------------------------------------------- kernels
def _dtype_of(args, kwargs):
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.dtype
        if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            return a[0].dtype
    d = kwargs.get("dtype")
    return d if isinstance(d, torch.dtype) else None


def _cell(op: str, backend: str) -> array:
    key = (op, backends.stats_name(backend))
    cell = STATE.cells.get(key)
    if cell is None:
        cell = STATE.cells[key] = array("q", [0, 0, 0])
    return cell


def _native_runner(op: str):
    name, overload = names.split(op)
    key = "CUDA" if torch_fl.backing() == "cuda" else "CPU"
    if torch._C._dispatch_has_computed_kernel_for_dispatch_key(names.qualified(op), key):
        return functools.partial(torch_fl._C._run_native, name, overload)
    return functools.partial(torch_fl._C._run_cpu_fallback, name, overload)


def _warn_once(op: str, backend: str, dtype, message) -> None:
    """Warn once per (op, backend, dtype); `message()` builds the text only for that first warning."""
    key = (op, backend, dtype)
    if key in STATE.warned:
        return
    STATE.warned.add(key)
    warnings.warn(message(), FallbackWarning, stacklevel=4)


def _strict_error(op: str, backend: str, why: str) -> RuntimeError:
    enc = op.replace(".", "__")
    return RuntimeError(
        f"flagos: {op} is routed to '{backend}' but {why}, and FLAGOS_STRICT=1 forbids falling back to native. "
        f"Route it elsewhere (FLAGOS_OP_{enc}=native, or set_route('{op}', 'native')) or unset FLAGOS_STRICT."
    )


_DEVICE_FAULTS = ("CUDA error", "illegal memory access", "device-side assert", "CUBLAS_STATUS", "cudaError")


def _log_wrap(inner, op: str, backend: str):
    line = f"[flagos dispatch] {op} -> {backend}\n"

    def logged(*args, **kwargs):
        sys.stderr.write(line)
        sys.stderr.flush()
        return inner(*args, **kwargs)

    return logged


def _make_callable(op: str, target: Target, native_run, mutable: bool):
    """The callable for one target, without logging."""
    backend = target.backend
    strict = STATE.strict  # part of the plan: a change rebuilds the kernel
    if target.kind == "native":
        return native_run
    if target.kind == "fallback":
        cell = _cell(op, backend)
        reason = target.reason

        def fallback(*args, **kwargs):
            if strict:
                raise _strict_error(op, backend, reason)
            cell[1] += 1
            dt = _dtype_of(args, kwargs)
            _warn_once(
                op,
                backend,
                dt,
                lambda: (
                    f"flagos: {op} ({names.dtype_name(dt)}) routed to '{backend}' ran "
                    f"natively instead: {reason}. Explain: python -m torch_fl explain {op}"
                ),
            )
            return native_run(*args, **kwargs)

        return fallback

    b = backends.get(backend)
    fn = b.kernel(op)
    cell = _cell(op, backend)
    counts_itself = backends.stats_name(backend) == "cpu_fallback"  # the C++ core counts those calls
    bad_dtypes = b.unsupported_dtypes()

    def on_error(e, args, kwargs):
        cell[2] += 1
        text = str(e)
        if any(s in text for s in _DEVICE_FAULTS):
            raise e  # a device fault: the device state is suspect, running it again elsewhere would hide it
        dt = _dtype_of(args, kwargs)
        why = f"its kernel raised {type(e).__name__}: {text.splitlines()[0] if text else ''}"
        if strict:
            raise _strict_error(op, backend, why) from e
        with _lock:
            STATE.failed.setdefault(op, set()).add((backend, dt))
        _warn_once(
            op,
            backend,
            dt,
            lambda: (
                f"flagos: {op} ({names.dtype_name(dt)}) on '{backend}': {why}; "
                f"this and later {names.dtype_name(dt)} calls run natively."
            ),
        )
        _refresh(op)  # later calls of this dtype go straight to native
        if mutable:
            raise RuntimeError(
                f"flagos: {op} on '{backend}' raised {type(e).__name__} ({text}). It is an in-place/out= operator "
                "that may already have written part of its output, so it is not re-run natively; later "
                f"{names.dtype_name(dt)} calls run natively. Route {op} to native to avoid this."
            ) from e
        cell[1] += 1
        return native_run(*args, **kwargs)

    bad_reason = f"{backend} does not support that dtype"

    def on_bad_dtype(*args, **kwargs):
        dt = _dtype_of(args, kwargs)
        if strict:
            raise _strict_error(op, backend, f"{backend} does not support {names.dtype_name(dt)}")
        cell[1] += 1
        _warn_once(
            op,
            backend,
            dt,
            lambda: f"flagos: {op} ({names.dtype_name(dt)}) routed to '{backend}' ran natively instead: {bad_reason}.",
        )
        return native_run(*args, **kwargs)

    if bad_dtypes:

        def kernel(*args, **kwargs):
            if _dtype_of(args, kwargs) in bad_dtypes:
                return on_bad_dtype(*args, **kwargs)
            if not counts_itself:
                cell[0] += 1
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001
                return on_error(e, args, kwargs)

    elif counts_itself:

        def kernel(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001
                return on_error(e, args, kwargs)

    else:

        def kernel(*args, **kwargs):
            cell[0] += 1
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001
                return on_error(e, args, kwargs)

    on_empty = None
    if b.empty_inputs_unsafe:
        on_empty = _empty_input_fallback(op, backend, b.empty_inputs_unsafe, native_run, cell, strict)
        kernel = _guard_empty_inputs(op, kernel, on_empty)
    if isinstance(fn, torch_fl._C.OnNative) and not counts_itself:
        # What the C++ kernel (torch_fl._C.PyRoute) needs to run this route
        # without a Python frame per call; the policies stay here.
        kernel.py_route = (fn.fn, on_error, on_bad_dtype, frozenset(bad_dtypes), on_empty, cell)
    return kernel


def _empty_input_fallback(op: str, backend: str, unsafe: str, native_run, cell: array, strict: bool):
    """Runs a call with an empty input tensor natively, for a backend that is not given those (`unsafe`: why)."""
    why = f"an input tensor is empty and '{backend}' kernels are not given empty tensors"

    def on_empty(*args, **kwargs):
        if strict:
            raise _strict_error(op, backend, why)
        cell[1] += 1
        _warn_once(
            op,
            backend,
            "empty input",
            lambda: (
                f"flagos: {op} routed to '{backend}' ran natively for a call with an empty input: {why} "
                f"({unsafe}). Counted as a fallback; other calls use '{backend}'."
            ),
        )
        return native_run(*args, **kwargs)

    return on_empty


def _guard_empty_inputs(op: str, kernel, on_empty):
    """`kernel`, except that calls with an empty input tensor (out= and in-place targets aside) go to `on_empty`."""
    positions, arg_names = names.read_args(op)

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


def _plan(op: str, route: OpRoute) -> tuple:
    """A hashable description of what the op's kernel must do; equal plans need no re-registration."""
    fails = tuple(sorted((b, str(d)) for b, d in STATE.failed.get(op, ())))
    extra_dtypes = tuple(sorted({d for _, d in STATE.failed.get(op, ()) if d is not None}, key=str))
    default = target_for(op, route.default, None)
    by = tuple((d, target_for(op, r, d)) for d, r in route.by_dtype)
    # a kernel failure for one dtype adds a dtype entry that falls back
    known = {d for d, _ in by}
    by += tuple((d, target_for(op, route.default, d)) for d in extra_dtypes if d not in known)
    return (default, by, fails, STATE.log_dispatch, STATE.strict)


def _build_kernel(op: str, plan: tuple):
    default, by, _, log, _ = plan
    native_run = _native_runner(op)
    mutable = names.is_mutable(op)

    def one(t: Target):
        k = _make_callable(op, t, native_run, mutable)
        return _log_wrap(k, op, t.backend) if log else k

    first = one(default)
    if not by:
        return first
    table = {d: one(t) for d, t in by}
    get = table.get

    def by_dtype(*args, **kwargs):
        return get(_dtype_of(args, kwargs), first)(*args, **kwargs)

    return by_dtype


def _needs_kernel(plan: tuple) -> bool:
    default, by, *_ = plan
    return default.kind != "native" or any(t.kind != "native" for _, t in by)


def _register(op: str, cell: list) -> torch.library.Library:
    """Register a trampoline to cell[0] for `op` at PrivateUse1.

    A route change then swaps cell[0] instead of re-registering: torch 2.11
    refuses a second Python kernel for the same op and key, and a kernel that
    falls back re-plans its own op while it is running.
    """

    def trampoline(*args, **kwargs):
        return cell[0](*args, **kwargs)

    trampoline.__name__ = f"flagos_route_{op.replace('.', '_')}"
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 'Overriding a previously registered kernel': that is the point
        lib.impl(op, trampoline, "PrivateUse1")
    return lib


def _set_label(op: str, label: str | None) -> None:
    if label is None:
        if STATE.labels.pop(op, None) is not None:
            torch_fl._C._set_native_label(op, "")
    elif STATE.labels.get(op) != label:
        torch_fl._C._set_native_label(op, label)
        STATE.labels[op] = label


def _unregister(handle) -> None:
    """Remove an operator's kernel (torch.library.Library or PyRoute): the C++ native route takes over."""
    if isinstance(handle, torch_fl._C.PyRoute):
        handle.destroy()
    else:
        handle._destroy()


def _py_route_parts(op: str, plan: tuple):
    """PyRoute.update arguments, or None when the plan needs the Python kernel.

    Eligible: the default target is a Python backend kernel (FlagGems) and
    every per-dtype entry runs natively or falls back (what a kernel failure
    adds); those dtypes, and the ones the backend lacks, go to `other_dtype`.
    """
    default, by, *_ = plan
    if default.kind in ("native", "fallback") or any(t.kind not in ("native", "fallback") for _, t in by):
        return None
    native_run = _native_runner(op)
    mutable = names.is_mutable(op)
    parts = getattr(_make_callable(op, default, native_run, mutable), "py_route", None)
    if parts is None:
        return None
    fn, on_error, on_bad_dtype, bad_dtypes, on_empty, cell = parts
    per_dtype = {d: _make_callable(op, t, native_run, mutable) for d, t in by}
    get = per_dtype.get

    def other_dtype(*args, **kwargs):
        return get(_dtype_of(args, kwargs), on_bad_dtype)(*args, **kwargs)

    other = sorted(bad_dtypes | {d for d in per_dtype if isinstance(d, torch.dtype)}, key=str)
    return fn, on_error, other_dtype, other, on_empty, cell


def _autograd_fallback(op: str, plan: tuple):
    """What the autograd guard does when a call of a routed op needs a gradient and runs as its decomposition."""
    default, by, *_ = plan
    strict = STATE.strict

    def accounting(t: Target):
        # None for a native target: its decomposition is simply what native does.
        return None if t.kind == "native" else (t.backend, _cell(op, t.backend))

    per_dtype = {d: accounting(t) for d, t in by}
    other = accounting(default)

    def why(backend: str) -> str:
        return f"it needs a gradient, which PyTorch gets by decomposing {op}, and '{backend}' has no backward for it"

    def on_fallback(args, kwargs):
        dt = _dtype_of(args, kwargs)
        hit = per_dtype.get(dt, other)
        if hit is None:
            return
        backend, cell = hit
        if strict:
            raise _strict_error(op, backend, why(backend))
        cell[1] += 1
        _warn_once(
            op,
            backend,
            dt,
            lambda: (
                f"flagos: {op} ({names.dtype_name(dt)}) routed to '{backend}' ran as PyTorch's decomposition: "
                f"{why(backend)}. Its parts run as routed; calls without gradients use '{backend}'."
            ),
        )

    return on_fallback


def _apply_op(op: str, route: OpRoute | None) -> None:
    if route is None:
        old = STATE.libs.pop(op, None)
        if old is not None:
            _unregister(old[1])
        _set_label(op, None)
        autograd_guard.set_routed(op, None)
        return
    plan = _plan(op, route)
    default = plan[0]
    _set_label(op, route.default.backend if route.default is not None and default.kind == "native" else None)
    old = STATE.libs.get(op)
    if not _needs_kernel(plan):
        if old is not None:
            _unregister(STATE.libs.pop(op)[1])  # the C++ native route takes over again
        autograd_guard.set_routed(op, None)
        return
    if old is not None and old[0] == plan:
        return
    autograd_guard.set_routed(op, _autograd_fallback(op, plan))
    parts = _py_route_parts(op, plan)
    if parts is not None:
        # The common case: one Python backend (FlagGems), native or fallback
        # for the other dtypes. A C++ kernel runs it; it is registered once
        # and a later plan of the same shape swaps its state, also from inside
        # a call (a failing kernel re-plans its own operator).
        if old is not None and not isinstance(old[1], torch_fl._C.PyRoute):
            _unregister(old[1])
            old = None
        handle = old[1] if old is not None else torch_fl._C.PyRoute(op)
        handle.update(*parts, label=plan[0].backend)
        STATE.libs[op] = (plan, handle, None)
        return
    if old is not None and isinstance(old[1], torch_fl._C.PyRoute):
        _unregister(old[1])
        old = None
    if old is not None:
        _, lib, cell = old
        cell[0] = _build_kernel(op, plan)
    else:
        cell = [_build_kernel(op, plan)]
        lib = _register(op, cell)
    STATE.libs[op] = (plan, lib, cell)


# scaled_dot_product_attention without gradients runs the backing device's
# own SDPA in one call unless one of these has a route of its own.
_ATTENTION_OPS = ("scaled_dot_product_attention", "_scaled_dot_product_", "_fused_sdp_choice")


def _note_attention_routes() -> None:
    torch_fl._C._set_attention_routed(any(op.startswith(_ATTENTION_OPS) for op in STATE.libs))


def _refresh(op: str) -> None:
    with _lock:
        _apply_op(op, STATE.resolved.get(op) or OpRoute(op, None))
        _note_attention_routes()


def apply() -> None:
    """Resolve all layers and bring registrations in line with the result."""
    with _lock:
        resolved, notes = resolve(all_rules())
        for note in notes:
            if note not in STATE.glob_notes:
                warnings.warn(f"flagos routing: {note}", FallbackWarning, stacklevel=3)
        STATE.glob_notes = notes
        stale = (set(STATE.libs) | set(STATE.labels) | set(STATE.resolved)) - set(resolved)
        STATE.resolved = resolved
        for op in stale:
            _apply_op(op, None)
        for op, route in resolved.items():
            _apply_op(op, route)
        _note_attention_routes()


def set_flags(log_dispatch=None, log_fallback=None, strict=None) -> None:
    """Change the log/strict flags (the env vars set them at import) and rebuild kernels."""
    with _lock:
        if log_dispatch is not None:
            STATE.log_dispatch = bool(log_dispatch)
            torch_fl._C._set_log_dispatch(STATE.log_dispatch)
        if log_fallback is not None:
            STATE.log_fallback = bool(log_fallback)
            torch_fl._C._set_log_fallback(STATE.log_fallback)
        if strict is not None:
            STATE.strict = bool(strict)
            torch_fl._C._set_strict(STATE.strict)
        apply()


# ------------------------------------------------------------- runtime API
def parse_op_key(op: str) -> tuple[str, torch.dtype | None]:
    """`mm`, `aten::mm.default`, `mm[bfloat16]` -> (normalised op, dtype)."""
    if not isinstance(op, str):
        raise RoutingError(f"operator names are strings like 'add.Tensor', got {op!r}")
    text = op.strip()
    dtype = None
    if text.endswith("]") and "[" in text:
        text, _, dt = text[:-1].partition("[")
        try:
            dtype = names.parse_dtype(dt)
        except ValueError as e:
            raise RoutingError(str(e)) from None
    norm = names.normalize(text)
    if names.is_glob(norm):
        raise RoutingError(f"'{op}': set_route takes one operator, not a glob; put globs in a routing file")
    if not names.is_known(norm):
        raise RoutingError(names.unknown_op_message(norm))
    return norm, dtype


def check_backend_name(backend: str) -> None:
    from torch_fl.routing.config import check_backend

    msg = check_backend(backend) if isinstance(backend, str) else f"backend names are strings, got {backend!r}"
    if msg:
        raise RoutingError(msg)


def set_runtime(op: str, backend: str | None) -> None:
    norm, dtype = parse_op_key(op)
    with _lock:
        if backend is None:
            STATE.runtime_rules.pop((norm, dtype), None)
        else:
            check_backend_name(backend)
            if core_op(norm) and not backends.get(backend).native:
                raise RoutingError(
                    f"aten::{norm} is implemented by the flagos core itself and cannot be routed "
                    f"to '{backend}'; only native routes apply to it."
                )
            STATE.runtime_order += 1
            STATE.runtime_rules[(norm, dtype)] = Rule(
                norm, backend, dtype, layer=LAYER_RUNTIME, origin="runtime", order=STATE.runtime_order
            )
        # a new explicit route gives a failed backend another chance for this op
        STATE.failed.pop(norm, None)
        apply()
