"""Measured routing: `torch_fl.calibrate(fn)` and `python -m torch_fl calibrate`.

Records the (operator, dtype, signature) calls a workload makes on flagos
(record.py), times each on native and on a candidate backend (FlagGems'
`flaggems`, replayed, by default) and checks the candidate's results against native's
(measure.py), decides which backend each (operator, dtype, size class) gets
(decide.py), confirms the candidate's classes on the whole workload
(confirm.py) and writes the routing file. docs/routing.md,
"Measured routing", describes the workflow and the file.
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from torch_fl import backends
from torch_fl._core import VERSION, backing
from torch_fl.calibration import confirm, decide, isolate, measure, record
from torch_fl.routing import config, native_only, rules
from torch_fl.vocab.errors import RoutingError


@dataclass
class Calibration:
    """What calibrate() recorded, measured and decided, and the routing file's text."""

    candidate: str
    text: str
    recorder: record.Recorder
    measurements: list[measure.Measurement] = field(default_factory=list)
    classes: list[decide.SizeClass] = field(default_factory=list)
    unavailable: str | None = None  # why the candidate could not be measured: the file routes nothing
    path: str | None = None
    trials: list[confirm.Trial] = field(default_factory=list)  # the workload routed against native (confirm.py)

    @property
    def saved_s(self) -> float:
        """Estimated time the file's routes save per run of the workload, over the recorded calls."""
        return sum(c.saved_s for c in self.classes)

    @property
    def routed(self) -> list[decide.SizeClass]:
        """The classes given to the candidate."""
        return [c for c in self.classes if c.backend != "native"]

    def summary(self) -> str:
        r = self.recorder
        if self.unavailable:
            return (
                f"recorded {r.total} flagos calls of {len(r.skipped)} operators\n"
                f"measured nothing: {self.candidate} is unavailable: {self.unavailable}"
            )
        recorded = sum(c.count for c in r.calls.values())
        lines = [
            f"recorded {r.total} flagos calls; {recorded} of them in {len(r.calls)} signatures of "
            f"{len({k.op for k in r.calls})} operators {self.candidate} has"
        ]
        rejected = sum(1 for m in self.measurements if not m.ok)
        if r.unkept:
            lines.append(f"{r.unkept} signatures past the per-operator limit were counted, not measured")
        lines.append(
            f"measured {len(self.measurements)} signatures ({rejected} rejected: {self.candidate}'s result not "
            f"accepted); {len(self.routed)} of {len(self.classes)} classes go to {self.candidate}"
        )
        native_total = sum(c.native_s for c in self.classes)
        lines.append(
            f"estimated time saved per run: {self.saved_s * 1e3:.3f} ms of {native_total * 1e3:.3f} ms "
            "in the measured operators"
        )
        dropped = sum(1 for c in self.classes if c.note == confirm.DROPPED)
        if self.trials and self.trials[-1].won:
            lines.append(
                f"confirmed on the workload: {self.trials[-1]}"
                + (
                    f"; {dropped} {'class' if dropped == 1 else 'classes'} that won alone left native"
                    if dropped
                    else ""
                )
            )
        elif self.trials:
            lines.append(f"not confirmed on the workload ({self.trials[0]}; no smaller set won either): all native")
        if not self.routed and not dropped:
            lines.append(f"no class is faster on {self.candidate}: the file routes every measured call natively")
        return "\n".join(lines)


def candidate_ops(candidate: str) -> Callable[[str], bool]:
    """Which operators `candidate` can be measured on: those it has, routable away from native."""
    b = backends.get(candidate)
    return lambda op: b.supports_op(op) and not rules.core_op(op) and native_only.route_problem(op, candidate) is None


def default_include() -> str:
    """The shipped routing file of this backing (not the FlagGems profile): what the calibrated rules refine."""
    return config.BUILTIN_PREFIX + os.path.basename(config.default_file(backing(), False))


def _versions() -> str:
    fg = backends.get("flaggems")
    return f"torch {torch.__version__}, torch_fl {VERSION}, flag_gems {fg.version() or 'not available'}"


def _machine() -> str:
    gpu = ""
    if backing() == "cuda":
        gpu = f", {torch.flagos.get_device_name(torch.flagos.current_device())}"
    return f"{platform.node()} ({platform.machine()}{gpu}), backing {backing()}"


def check_candidate(candidate: str) -> backends.Backend:
    """The backend calibrate measures against native; RoutingError for an unknown name or a native route."""
    if candidate not in backends.BACKENDS:
        raise RoutingError(config.check_backend(candidate))
    b = backends.get(candidate)
    if b.native:
        raise RoutingError(f"'{candidate}' is the native route: calibrate compares native with another backend")
    return b


def calibrate(
    fn: Callable[[], object],
    output: str | None = None,
    *,
    candidate: str = "flaggems",
    timer: measure.Timer | None = None,
    rounds: int = 5,
    reps: int = 10,
    min_speedup: float = 1.05,
    per_op: int = 32,
    include: str | None = "default",
    command: str | None = None,
    progress: bool = True,
    excluded: dict[str, str] | None = None,
    journal: isolate.Journal | None = None,
    confirm_pairs: int = 3,
    workload_timer: confirm.WorkloadTimer | None = None,
) -> Calibration:
    """Record `fn()`'s flagos calls, measure them on native and on `candidate`, and (with `output`) write the
    routing file that picks the faster correct backend per (operator, dtype, size class).

    `timer(run, call, backend)` returns seconds per call (default: measure.SyncTimer on this machine, `reps`
    calls per sample); `include` is the file the rules refine ("default": this backing's shipped file, None:
    none). With the candidate unavailable (FlagGems not installed), nothing is measured and the file, if
    written, says so and has no rules: check `Calibration.unavailable`. `excluded` ({route key: why}) and
    `journal` are the worker's side of isolate.py: operators kept off the candidate, phases written down.
    The candidate's classes are then confirmed on the whole workload, `confirm_pairs` pairs of runs timed by
    `workload_timer(fn)` (default: from a synchronized device to a synchronized device; 0 pairs: not
    confirmed); the classes it cannot confirm are written native, saying why (confirm.py)."""
    b = check_candidate(candidate)
    if confirm_pairs < 0:
        raise ValueError(f"confirm_pairs must be 0 (no confirmation) or more, not {confirm_pairs}")
    include = default_include() if include == "default" else include
    unavailable = b.unavailable_reason()
    wanted = candidate_ops(candidate) if unavailable is None else (lambda op: False)
    rec = record.record(fn, wanted, per_op)
    result = Calibration(candidate, "", rec, unavailable=unavailable)
    if unavailable is None:
        device = torch.device("flagos", torch.flagos.current_device())
        timer = timer or measure.SyncTimer(device, reps)
        result.measurements = measure.measure(
            list(rec.calls.values()), candidate, timer, rounds, progress=progress, excluded=excluded, journal=journal
        )
        result.classes = decide.size_classes(result.measurements, candidate, min_speedup)
        if result.routed and confirm_pairs > 0:
            workload_timer = workload_timer or confirm.synchronized_timer(device)
            result.trials = confirm.confirm(fn, result.classes, include, confirm_pairs, workload_timer, progress)
    header = [
        "flagos routing measured by `python -m torch_fl calibrate` (docs/routing.md, Measured routing).",
        "Each rule's comment gives its measurements: median time per call on native and on the candidate,",
        "weighted by the workload's call counts (`python -m torch_fl explain OP --dtype D` shows them).",
        f"command: {command or shlex.join(sys.argv)}",
        f"machine: {_machine()}",
        f"versions: {_versions()}",
        f"date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
        f"candidate: {candidate}; {rounds} rounds, min speedup {min_speedup}, {confirm_pairs} confirmation pairs",
        *result.summary().splitlines(),
    ]
    if unavailable:
        header.append(f"NO RULES: {candidate} is unavailable here, so no call was measured.")
    result.text = decide.render(result.classes, header, include)
    problems: list = []
    config.parse_text(result.text, output or "<calibrated>", problems=problems)
    if problems:  # a defect of calibrate: never write a file validate would refuse
        raise RoutingError("calibrate produced an invalid routing file:\n  " + "\n  ".join(map(str, problems)))
    if output is not None:
        with open(output, "w", encoding="utf-8") as f:
            f.write(result.text)
        result.path = output
    return result
