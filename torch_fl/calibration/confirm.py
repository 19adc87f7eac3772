"""Confirming the measured classes on the whole workload before the file is written.

measure.py times each signature alone, called again and again: its caches
warm, nothing else in flight. In a model the calls interleave and the host
launches while the device runs, so a class that wins alone can lose there,
and a set of small wins can add up to a loss. So calibrate runs the workload
routed by the classes that won and with every class native, alternating
(ABBA) in this process, and keeps them only if the workload is faster with
them by more than the trial's noise: a gain inside the noise is no evidence,
and routing off native without one only adds risk. Otherwise it keeps the
half with the largest measured saving and tries again, until a set is
confirmed or none is left; the classes it drops say so in their comments.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from torch_fl import routing
from torch_fl.calibration import decide, stats
from torch_fl.calibration.measure import Progress

#: workload_timer(fn) -> seconds one run of the workload took (calibrate's default synchronizes the device)
WorkloadTimer = Callable[[Callable[[], object]], float]

DROPPED = "routed alone it won, but the workload was not measurably faster with it (calibrate's confirmation)"


@dataclass
class Trial:
    """The workload with `kept` classes routed to the candidate against all native, over `pairs` pairs."""

    kept: int
    ratio: float  # median of per-pair ratios, all-native seconds / routed seconds: above 1, routed is faster
    noise: float  # half the interquartile range of the per-pair ratios

    @property
    def won(self) -> bool:
        """Routed is faster, and by more than the noise."""
        return self.ratio - self.noise > 1.0

    def __str__(self) -> str:
        routed = f"{self.kept} class{'es' if self.kept != 1 else ''} routed"
        return f"{routed}: {self.ratio:.3f}x the workload's speed with none (noise {self.noise:.3f})"


def _rules_file(classes: list[decide.SizeClass], include: str | None, folder: str, name: str) -> str:
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(decide.render(classes, [], include))
    return path


def trial(fn, classes, kept, include, pairs: int, timer: WorkloadTimer, folder: str) -> Trial:
    """The workload routed by `kept` (a subset of `classes`' routed ones) against every class native."""
    ids = {id(c) for c in kept}
    routed = [c if id(c) in ids else _native(c) for c in classes]
    files = {
        "native": _rules_file([_native(c) for c in classes], include, folder, "native.conf"),
        "routed": _rules_file(routed, include, folder, "routed.conf"),
    }

    # ABBA: native, routed, routed, native, ... Each run of one side in a row shares one routing change and
    # follows one untimed run: a change drops replay's recordings of operators with size rules
    # (their next calls record again), which no timed run should pay.
    secs: dict[str, list[float]] = {"native": [], "routed": []}
    for side, count in stats.abba_blocks(pairs, "native", "routed"):
        with routing.using_config(files[side], origin="calibrate"):
            timer(fn)
            secs[side].extend(timer(fn) for _ in range(count))
    ratios = [n / r if r > 0 else float("inf") for n, r in zip(secs["native"], secs["routed"], strict=True)]
    q1, q3 = stats.quartiles(ratios, method="inclusive")
    return Trial(len(kept), statistics.median(ratios), (q3 - q1) / 2)


def _native(c: decide.SizeClass) -> decide.SizeClass:
    return c if c.backend == "native" else dataclasses.replace(c, backend="native")


def confirm(
    fn: Callable[[], object],
    classes: list[decide.SizeClass],
    include: str | None,
    pairs: int,
    timer: WorkloadTimer,
    progress: bool = True,
) -> list[Trial]:
    """Keep the routed classes the workload confirms (see the module doc); the others turn native, with a
    note. Returns the trials, the last one the kept set's (or the one that left none)."""
    if pairs < 1:
        raise ValueError(f"confirmation pairs must be at least 1, not {pairs}")
    kept = sorted((c for c in classes if c.backend != "native"), key=lambda c: -c.saved_s)
    trials: list[Trial] = []
    bar = Progress(max(1, len(kept)).bit_length(), "confirming on the workload", progress)  # halving: at most
    with tempfile.TemporaryDirectory(prefix="torch_fl_confirm_") as folder:
        while kept:
            t = trial(fn, classes, kept, include, pairs, timer, folder)
            trials.append(t)
            bar.step(str(t))
            if t.won:
                break
            kept = kept[: len(kept) // 2]
    bar.close()
    ids = {id(c) for c in kept}
    for c in classes:
        if c.backend != "native" and id(c) not in ids:
            c.backend, c.note = "native", DROPPED
    return trials


def synchronized_timer(device) -> WorkloadTimer:
    """Seconds one run of the workload takes, from a synchronized device to a synchronized device."""
    from torch_fl.models.workloads import synchronize

    def timer(fn: Callable[[], object]) -> float:
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        return time.perf_counter() - t0

    return timer
