"""Timing and checking recorded calls on native and on a candidate backend, through flagos's own routes.

Each (operator, dtype) is routed to one backend at a time with a runtime
route (`routing.route({"mm[bfloat16]": "native"})`), so what is timed is
what a routing file would run: for `flaggems`, the replay of what
its first call recorded. Rounds alternate native and candidate blocks, and
each signature's time is the median over the rounds.

A candidate's result must match native's within `torch.testing.assert_close`'s
per-dtype tolerance (the conformance runner's comparison), on fresh copies of
the recorded arguments (results, and arguments the operator writes). A
candidate that raised or ran natively instead (a fallback) is rejected too,
with the reason.
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_flatten, tree_map

from torch_fl import backends, routing
from torch_fl.calibration.isolate import Journal, exception_line
from torch_fl.calibration.record import Recorded, first_tensor
from torch_fl.models.workloads import synchronize
from torch_fl.routing.policy import device_fault
from torch_fl.vocab import ops
from torch_fl.vocab.dtypes import dtype_name
from torch_fl.vocab.errors import FallbackWarning

#: timer(run, call, backend) -> seconds per call of `run` (which runs `call` once on `backend`'s route)
Timer = Callable[[Callable[[], object], Recorded, str], float]


class SyncTimer:
    """Times on this machine: synchronize the device, `reps` calls, synchronize; the wall time per call."""

    def __init__(self, device: torch.device | str = "flagos", reps: int = 10):
        if reps < 1:
            raise ValueError(f"reps must be at least 1, not {reps}")
        self.device, self.reps = torch.device(device), reps

    def __call__(self, run: Callable[[], object], call: Recorded, backend: str) -> float:
        synchronize(self.device)
        t0 = time.perf_counter()
        for _ in range(self.reps):
            run()
        synchronize(self.device)
        return (time.perf_counter() - t0) / self.reps


@dataclass
class Measurement:
    """One signature on both routes: median seconds per call; `reason` when the candidate is rejected."""

    call: Recorded
    native_s: float
    candidate_s: float | None  # None: rejected, not timed
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


class Progress:
    """tqdm when installed, else one line per step on stderr."""

    def __init__(self, total: int, desc: str, enabled: bool = True):
        self.total, self.desc, self.n, self.bar = total, desc, 0, None
        self.enabled = enabled
        if enabled:
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=total, desc=desc, file=sys.stderr)
            except ImportError:
                self.bar = None

    def step(self, what: str) -> None:
        self.n += 1
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(what, refresh=False)
            self.bar.update(1)
        else:
            print(f"[calibrate] {self.desc} {self.n}/{self.total}: {what}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def aten(op: str):
    name, overload = ops.split(op)
    return getattr(getattr(torch.ops.aten, name), overload or "default")


def _fresh(call: Recorded):
    copy = lambda a: a.clone(memory_format=torch.preserve_format) if isinstance(a, torch.Tensor) else a  # noqa: E731
    return tree_map(copy, call.args), tree_map(copy, call.kwargs)


def _outputs(call: Recorded) -> list:
    """Run `call` once on fresh copies; its results and its arguments after the call, on the CPU."""
    args, kwargs = _fresh(call)
    result = aten(call.key.op)(*args, **kwargs)
    leaves = tree_flatten((result, args, kwargs))[0]
    return [x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in leaves]


def _synchronize(group: list[Recorded]) -> None:
    """Wait for the device of the group's tensors: a kernel's fault surfaces here, inside its journal phase."""
    first = first_tensor((group[0].args, group[0].kwargs))
    if first is not None:
        synchronize(first.device)


def _counts(op: str) -> dict[str, tuple[int, int, int]]:
    return {s.backend: (s.calls, s.fallbacks, s.failures) for s in routing.stats() if s.op == op}


def route_key(op: str, dtype: torch.dtype | None) -> str:
    """The runtime route key of (op, dtype): mm[bfloat16]."""
    return op if dtype is None else f"{op}[{dtype_name(dtype)}]"


def _compare(actual: list, expected: list, candidate: str) -> str | None:
    if len(actual) != len(expected):
        return f"{candidate} returned {len(actual)} values, native {len(expected)}"
    for a, e in zip(actual, expected, strict=True):
        if isinstance(e, torch.Tensor) != isinstance(a, torch.Tensor):
            return f"{candidate} returned {type(a).__name__} where native returned {type(e).__name__}"
        if not isinstance(e, torch.Tensor):
            if a != e:
                return f"{candidate} returned {a!r}, native {e!r}"
            continue
        try:
            torch.testing.assert_close(a, e, equal_nan=True, check_device=False)
        except AssertionError as err:
            lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
            return f"results differ from native beyond the {dtype_name(e.dtype)} tolerance: " + "; ".join(lines[:3])
    return None


def check(group: list[Recorded], candidate: str) -> dict[int, str | None]:
    """Per call of one (operator, dtype) (by id): why the candidate's result is not accepted, or None."""
    op, dtype = group[0].key.op, group[0].key.dtype
    key = route_key(op, dtype)
    with routing.route({key: "native"}):
        expected = {id(c): _outputs(c) for c in group}
    name = backends.stats_name(candidate)
    reasons: dict[int, str | None] = {}
    for c in group:
        # A route of its own per call: a kernel that raised runs its dtype natively from then on, until the
        # next route change (routing.planner), which would reject the calls after it as fallbacks.
        with routing.route({key: candidate}), warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)  # the fallback is reported as the reason
            before = _counts(op).get(name, (0, 0, 0))
            try:
                actual = _outputs(c)
            except Exception as e:  # the candidate's error is the measurement: reported as the reason
                if device_fault(e):
                    raise  # the device is unusable from here on: isolate.py's supervisor names this group
                reasons[id(c)] = f"{candidate} raised {exception_line(e)}"
                continue
            after = _counts(op).get(name, (0, 0, 0))
        if after[1] > before[1] or after[2] > before[2]:
            reasons[id(c)] = f"{candidate} did not run it: the call fell back to native (explain {op} says why)"
            continue
        reasons[id(c)] = _compare(actual, expected[id(c)], candidate)
    return reasons


def measure(
    calls: list[Recorded],
    candidate: str,
    timer: Timer,
    rounds: int = 5,
    warmup: int = 3,
    progress: bool = True,
    excluded: dict[str, str] | None = None,
    journal: Journal | None = None,
) -> list[Measurement]:
    """Check each kept call on `candidate`, then time it on native and (if accepted) on the candidate.

    `excluded` maps route keys (mm[bfloat16]) to why the candidate must not run them: those are timed on
    native only, rejected with that reason. `journal` is told when each (operator, dtype)'s check and timing
    begin and end, after the device finished them (isolate.py: a process that dies in between is blamed
    on that operator)."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    excluded, journal = excluded or {}, journal or Journal(None)
    groups: dict[tuple, list[Recorded]] = {}
    for c in calls:
        if c.kept:
            groups.setdefault((c.key.op, c.key.dtype), []).append(c)
    bar = Progress(len(groups), "measuring", progress)
    out: list[Measurement] = []
    try:
        for (op, dtype), group in groups.items():
            key = route_key(op, dtype)
            if key in excluded:
                reasons = {id(c): excluded[key] for c in group}
            else:
                with journal.phase(key, "checking"):
                    reasons = check(group, candidate)
                    _synchronize(group)
            times: dict[tuple[int, str], list[float]] = {}
            with journal.phase(key, "timing"):
                for r in range(rounds):
                    for backend in ("native", candidate):
                        with routing.route({key: backend}):
                            for c in group:
                                if backend != "native" and reasons[id(c)] is not None:
                                    continue
                                fn, args, kwargs = aten(op), c.args, c.kwargs

                                def run(fn=fn, args=args, kwargs=kwargs):
                                    return fn(*args, **kwargs)

                                # Replay records a signature's first calls (again after a route
                                # change where the operator has size rules, which drops its recordings).
                                for _ in range(warmup if r == 0 else 1):
                                    run()
                                times.setdefault((id(c), backend), []).append(timer(run, c, backend))
                _synchronize(group)
            for c in group:
                cand = times.get((id(c), candidate))
                native_s = statistics.median(times[(id(c), "native")])
                out.append(Measurement(c, native_s, statistics.median(cand) if cand else None, reasons[id(c)]))
            bar.step(f"{op} {dtype_name(dtype)}: {len(group)} signature(s)")
    finally:
        bar.close()
    return out
