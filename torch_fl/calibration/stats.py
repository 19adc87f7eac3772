"""Alternating timing and the statistics of its pairs: calibrate's confirmation and the benchmarks share them.

On a shared machine the load drifts between runs by more than the differences sought, so two sides are
timed in alternation (ABBA order: A B, B A, A B, ...), a pair's two measurements close together under the
same load, and the figure reported is the median of the per-pair ratios with its quartiles: half the
interquartile range is the noise.

Imports nothing of torch_fl (or torch): benchmarks/common.py loads this file without importing torch_fl,
since a process that registered the flagos device cannot run native CUDA backward (PyTorch issue 161129).
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence


def abba(i: int, first, second) -> tuple:
    """The order of pair `i`: (first, second) for even i, (second, first) for odd i."""
    return (first, second) if i % 2 == 0 else (second, first)


def abba_blocks(pairs: int, first, second) -> list[tuple[object, int]]:
    """(side, count) runs of `pairs` ABBA pairs (first, second, second, first, first, ...): a caller that pays
    for switching sides (a routing change) switches once per run, not once per timing."""
    order = [side for i in range(pairs) for side in abba(i, first, second)]
    return [(side, len(list(run))) for side, run in itertools.groupby(order)]


def alternating(rounds: int, measure: dict) -> dict:
    """{key: [one sample per round]}: each `measure[key]()` once a round, the order reversed every
    other round (ABBA), so drift on a shared machine hits every key alike."""
    keys = list(measure)
    samples: dict = {k: [] for k in keys}
    for r in range(rounds):
        for k in keys if r % 2 == 0 else keys[::-1]:
            samples[k].append(measure[k]())
    return samples


def paired_seconds(
    fns: dict, pairs: int, sync: Callable[[object], None], clock: Callable[[], float] = time.perf_counter
) -> dict:
    """{key: [seconds of each call]} for two keyed callables timed one after the other in ABBA pairs,
    each call timed to `sync(key)` (the device's synchronisation)."""
    a, b = fns
    secs: dict = {a: [], b: []}
    for i in range(pairs):
        for k in abba(i, a, b):
            t = clock()
            fns[k]()
            sync(k)
            secs[k].append(clock() - t)
    return secs


def quartiles(values: Sequence[float], method: str = "exclusive") -> tuple[float, float]:
    """(first, third) quartile by statistics.quantiles' `method`; both the value itself for a single value."""
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    q = statistics.quantiles(values, n=4, method=method)
    return q[0], q[2]


def median_interval(values: Sequence[float], level: float = 0.95) -> list[float] | None:
    """A distribution-free interval that holds the true median with probability >= `level`: the r-th
    smallest and r-th largest value for the largest r with P(Binomial(n, 1/2) < r) <= (1 - level) / 2.
    None where no r qualifies (fewer than 6 values at 0.95)."""
    n, tail = len(values), (1 - level) / 2
    below, r = 0.0, 0  # below: P(B < r + 1) as r grows
    while r < n // 2:
        below += math.comb(n, r) / 2**n
        if below > tail:
            break
        r += 1
    if r == 0:
        return None
    ordered = sorted(values)
    return [round(ordered[r - 1], 4), round(ordered[n - r], 4)]


def ratio_stats(ratios: Sequence[float]) -> dict:
    """Median of per-pair ratios, their quartiles, the noise (half the interquartile range; None for one
    pair, which has no spread to measure) and the median's 95% interval (median_interval)."""
    q1, q3 = quartiles(ratios)
    return {
        "pairs": len(ratios),
        "ratio_median": statistics.median(ratios),
        "ratio_quartiles": [round(q1, 4), round(q3, 4)],
        "noise": round((q3 - q1) / 2, 4) if len(ratios) > 1 else None,
        "median_ci95": median_interval(ratios),
    }


def format_ratio(stats: dict) -> str:
    """ratio_stats' median with its noise and 95% interval where there are: '0.903x ± 0.026, 95% interval
    0.871-0.930', '0.903x ± 0.026' or '1.126x'."""
    noise, ci = stats.get("noise"), stats.get("median_ci95")
    return (
        f"{stats['ratio_median']:.3f}x"
        + (f" ± {noise:.3f}" if noise is not None else "")
        + (f", 95% interval {ci[0]:.3f}-{ci[1]:.3f}" if ci else "")
    )
