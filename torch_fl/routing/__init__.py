"""Per-operator routing of flagos: which backend runs each ATen operator.

Public API (other code relies on exactly these):

    set_route(op, backend)        route one operator (`"add.Tensor"`, `"mm"`, `"mm[bfloat16]"`)
    route({op: backend, ...})     context manager; undoes its routes on exit (blocks of any thread nest)
    table()                       effective routes: RouteEntry(op, backend, source, dtype, runs_on, reason)
    explain(op, dtype=None)       candidates in order and why each was taken or rejected (str() to read)
    stats() / reset_stats()       OpStat(op, backend, calls, fallbacks, failures) rows

A bare operator name is the default overload (`mm` is `aten::mm.default`),
as in FEP 0025 files. Backend names: native, cuda, cpu, flaggems,
flaggems_python, flagos_python, cpu_fallback, ascend. See docs/routing.md.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from typing import NamedTuple

import torch

from torch_fl import backends
from torch_fl._core import _C, backing
from torch_fl.backends import cpu_random
from torch_fl.backends.flaggems import FlagGemsBackend
from torch_fl.flagos import graphs
from torch_fl.routing import config, env, planner, registry, rules
from torch_fl.routing.conditions import format_value
from torch_fl.routing.explain import Explanation
from torch_fl.routing.explain import explain as _explain
from torch_fl.routing.state import LOCK, STATE
from torch_fl.vocab import device_checks
from torch_fl.vocab.dtypes import dtype_name
from torch_fl.vocab.errors import ConfigError, FallbackWarning, Problem, RoutingError
from torch_fl.vocab.ops import parse_op_key


class RouteEntry(NamedTuple):
    op: str
    backend: str  # as written
    source: str  # "default file backends_cpu.conf:3", "user file PATH:LINE", "env FLAGOS_OP_add__Tensor", "runtime"
    dtype: str | None = None  # None: every dtype
    runs_on: str = ""  # backend as written, or "native (<platform>)" when it falls back
    reason: str | None = None  # why it falls back


class OpStat(NamedTuple):
    op: str
    backend: str  # native, cpu_fallback, flaggems, flaggems_python, ascend
    calls: int  # calls that ran on this backend (kernel attempts for Python backends)
    fallbacks: int  # calls routed to this backend that ran natively instead
    failures: int  # calls whose kernel raised


def set_route(op: str, backend: str) -> None:
    """Route `op` (e.g. "add.Tensor", "mm", "mm[bfloat16]") to `backend` from the next call on.

    Takes precedence over the routing file and FLAGOS_OP_* for that operator
    (for every dtype, unless a dtype is given in brackets). `backend` is a name;
    clear_route(op) drops the runtime route.
    """
    config.check_backend_name(backend)  # None too: planner.set_runtime(op, None) would clear the route
    planner.set_runtime(op, backend)


def clear_route(op: str) -> None:
    """Drop a runtime route set with set_route; the file/env route applies again."""
    planner.set_runtime(op, None)


@contextlib.contextmanager
def route(mapping: dict[str, str]):
    """`with route({"add.Tensor": "cpu_fallback"}): ...` -- runtime routes for the block, undone on exit.

    Routes are process-wide (PyTorch registers kernels for the whole process), so a block's routes apply to
    every thread while it is active. Active blocks form one stack, in the order they were entered: a block's
    exit undoes exactly its own change. For each operator it routed, the route it replaced comes back, unless
    a block entered later that routes the same operator is still active; then that block will restore it
    instead when it exits (its record of what it replaced is rewritten). So once all blocks have exited, in
    whatever order and from whatever threads, the runtime routes are what they were before the first
    entered. A set_route or clear_route of a block's operator made while the block is active is undone with
    the block.
    """
    keys = [parse_op_key(op) for op in mapping]
    for b in mapping.values():
        config.check_backend_name(b)
    with LOCK:
        block = _Block({k: STATE.runtime_rules.get(k) for k in keys})
        STATE.route_blocks.append(block)
        try:
            for op, backend in mapping.items():
                planner.set_runtime(op, backend)
        except BaseException:
            _exit_block(block)
            raise
    try:
        yield
    finally:
        _exit_block(block)


class _Block:
    """An active route() block: what each operator's runtime route was before it (None: none)."""

    __slots__ = ("replaced",)

    def __init__(self, replaced: dict):
        self.replaced = replaced


def _exit_block(block: _Block) -> None:
    """Undo `block`'s routes: into the live table, or into the record of a later active block that routes the
    same operator (which then restores it on its own exit)."""
    with LOCK:
        stack = STATE.route_blocks
        i = next(n for n, b in enumerate(stack) if b is block)
        for key, rule in block.replaced.items():
            later = next((b for b in stack[i + 1 :] if key in b.replaced), None)
            if later is not None:
                later.replaced[key] = rule
            elif rule is None:
                STATE.runtime_rules.pop(key, None)
            else:
                STATE.runtime_rules[key] = rule
        del stack[i]
        planner.apply()


def table() -> list[RouteEntry]:
    """The effective routes (every operator a rule names), with where each came from."""
    out = []
    for op, r in sorted(STATE.resolved.items()):
        failed = STATE.failed.get(op, ())
        rows = ([(None, r.default)] if r.default is not None else []) + list(r.by_dtype)
        if r.default is not None:
            # dtypes whose kernel raised run natively from then on: a row each, saying so
            known = {dt for dt, _ in rows}
            demoted = {d for b, d in failed if d is not None and b == r.default.backend} - known
            rows += [(d, r.default) for d in sorted(demoted, key=str)]
        for dt, rule in rows:
            t = rules.target_for(op, rule, dt, failed)
            runs = rule.backend if t.kind != "fallback" else f"native ({backing()})"
            out.append(
                RouteEntry(op, rule.backend, rule.source, None if dt is None else dtype_name(dt), runs, t.reason)
            )
        for dt, classes in r.by_size:
            for n, rule in classes:
                t = rules.target_for(op, rule, dt, failed)
                runs = rule.backend if t.kind != "fallback" else f"native ({backing()})"
                where = f"{dtype_name(dt)}, " if dt is not None else ""
                out.append(RouteEntry(op, rule.backend, rule.source, f"{where}numel>={n}", runs, t.reason))
        for dt, classes in r.by_value:
            for v, base, sizes in classes:
                for n, rule in ((None, base), *sizes):
                    if rule is None:
                        continue
                    t = rules.target_for(op, rule, dt, failed)
                    runs = rule.backend if t.kind != "fallback" else f"native ({backing()})"
                    conds = [dtype_name(dt)] if dt is not None else []
                    conds += [f"{r.arg}={format_value(v)}"] + ([f"numel>={n}"] if n is not None else [])
                    out.append(RouteEntry(op, rule.backend, rule.source, ", ".join(conds), runs, t.reason))
    return out


def flaggems_ops() -> list[str]:
    """The operators some of whose calls run a FlagGems kernel (flaggems or flagos_python) now."""
    out = []
    for op, entry in sorted(registry.REGISTERED.items()):
        targets = entry.plan.targets()
        if any(t.kind == "kernel" and isinstance(backends.get(t.backend), FlagGemsBackend) for t in targets):
            out.append(op)
    return out


def notes() -> list[str]:
    """Warnings from resolving the rules (e.g. a glob rule that applies to no operator)."""
    return list(STATE.glob_notes)


def explain(op: str, dtype: torch.dtype | str | None = None) -> Explanation:
    """Why `op` runs where it runs: candidates in precedence order, taken / shadowed / rejected and why."""
    return _explain(op, dtype)


def stats() -> list[OpStat]:
    """Calls per (op, backend that ran), with fallbacks and failures; includes the C++ native route's counts."""
    rows: dict[tuple[str, str], list[int]] = {}
    for op, kind, calls in _C._route_stats():
        if op.startswith(cpu_random.QUALIFIED_PREFIX):
            continue  # torch_fl's own operator, asked once for the host generators
        rows.setdefault((op, kind), [0, 0, 0])[0] += calls
    for key, counters in list(STATE.counters.items()):
        if any(counters):
            row = rows.setdefault(key, [0, 0, 0])
            for i in range(3):
                row[i] += counters[i]
    return [OpStat(op, b, *v) for (op, b), v in sorted(rows.items())]


def reset_stats() -> None:
    _C._reset_route_stats()
    for counters in STATE.counters.values():
        counters[0] = counters[1] = counters[2] = 0  # in place: kernels hold these arrays


def set_log_dispatch(enabled: bool) -> None:
    """Print `[flagos dispatch] <overload> -> <backend>` per routed call from the next call on
    (what FLAGOS_LOG_DISPATCH=1 does at import); every route's kernel is rebuilt, so the per-call
    path keeps reading no flag while logging is off."""
    planner.set_flags(log_dispatch=enabled)


@contextlib.contextmanager
def dispatch_log(enabled: bool = True):
    """`with routing.dispatch_log(): ...` logs the calls inside; the previous setting is restored on exit."""
    before = STATE.log_dispatch
    set_log_dispatch(enabled)
    try:
        yield
    finally:
        set_log_dispatch(before)


def config_file() -> str | None:
    """The routing file in effect (the shipped default or FLAGOS_BACKEND_CONFIG)."""
    return STATE.config_file


def load_config(path: str, origin: str = "user file") -> None:
    """Replace the file layer with `path` (validated; ConfigError lists every problem)."""
    rules = config.load_file(path, origin=origin)
    with planner.changing():
        STATE.file_rules = rules
        STATE.config_file = path
        planner.apply()


@contextlib.contextmanager
def using_config(path: str, origin: str = "user file"):
    """`with using_config("other.conf"): ...` -- the file layer replaced by `path`, restored on exit."""
    with LOCK:
        saved = STATE.file_rules, STATE.config_file
    load_config(path, origin)
    try:
        yield
    finally:
        with planner.changing():
            STATE.file_rules, STATE.config_file = saved
            planner.apply()


def _route_counts() -> Counter:
    """Calls per (operator, backend that ran) so far, fallbacks counted under 'fallback:<backend>': what a
    torch.flagos.CUDAGraph counts of its capture (torch_fl/flagos/graphs.py)."""
    counts: Counter = Counter()
    for row in stats():
        counts[(row.op, row.backend)] += row.calls
        if row.fallbacks:
            counts[(row.op, f"fallback:{row.backend}")] += row.fallbacks
    return counts


def _startup(environ=None) -> None:
    """Read config and env once (at `import torch_fl`), validate, register kernels."""
    environ = os.environ if environ is None else environ
    graphs.route_counts = _route_counts  # the device API counts captured routed calls through routing
    # CPU scalars refused where CUDA's kernels refuse them: every argument of the yaml's checked operators, the
    # measured arguments of the rest
    _C._set_checked_ops(device_checks.checked_ops() + device_checks.measured_entries())
    # out= calls of CPU scalars alone
    _C._set_tensor_iterator_ops(device_checks.tensor_iterator_ops() + device_checks.measured_out_ops())
    env.warn_unknown_variables(environ)  # a misspelt FLAGOS_STRICT would otherwise be ignored silently
    log_dispatch = env.flag(environ, "FLAGOS_LOG_DISPATCH")
    log_fallback = env.flag(environ, "FLAGOS_LOG_FALLBACK")
    strict = env.flag(environ, "FLAGOS_STRICT")
    use_flaggems = env.flag(environ, "FLAGOS_USE_FLAGGEMS")
    from torch_fl.backends import flaggems

    flaggems.source_dir()  # validates FLAGGEMS_SOURCE_DIR now, not at first use
    path = environ.get("FLAGOS_BACKEND_CONFIG", "").strip()
    if path and use_flaggems:
        raise RoutingError(
            "FLAGOS_BACKEND_CONFIG and FLAGOS_USE_FLAGGEMS=1 are both set; set one. To use the FlagGems profile "
            "with your own changes, put 'include builtin:backends_flaggems.conf' at the top of your file."
        )
    if path:
        origin = "user file"  # config.load_file says what is wrong with the path (missing, a directory, ...)
    else:
        path, origin = config.default_file(backing(), use_flaggems), "default file"
    file_rules = config.load_file(path, origin=origin)
    env_rules = env.op_overrides(environ)
    with planner.changing():
        STATE.file_rules = file_rules
        STATE.env_rules = env_rules
        STATE.config_file = path
        STATE.log_dispatch = log_dispatch
        STATE.log_fallback = log_fallback
        STATE.strict = strict
        _C._set_log_dispatch(log_dispatch)
        _C._set_log_fallback(log_fallback)
        _C._set_strict(strict)
        planner.apply()


__all__ = [
    "ConfigError",
    "Explanation",
    "FallbackWarning",
    "OpStat",
    "Problem",
    "RouteEntry",
    "RoutingError",
    "clear_route",
    "config_file",
    "dispatch_log",
    "explain",
    "load_config",
    "notes",
    "reset_stats",
    "route",
    "set_log_dispatch",
    "set_route",
    "stats",
    "table",
]
