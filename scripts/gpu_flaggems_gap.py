"""Why a flaggems-routed add costs more over the direct call than a routed mul (issue 3).

    python3 scripts/gpu_flaggems_gap.py    (on the H200, carry .whl; see scripts/gpu_check.sh)

overhead.py measured, call by call, +3.3 to +4.5 us for add and +1.6 to +2.2 us
for mul; route_breakdown.py put most of add's extra in "fresh alias tensors
instead of persistent ones", which the route (whose aliases are pooled) does
not use. This splits the question:

1. what each function of the direct and the routed call costs (cProfile,
   top functions by own time, per call): where the routed add spends more;
2. the paired gap with Python's garbage collector on and off (a call that
   allocates more objects triggers more young-generation collections, whose
   cost lands on whichever call runs then);
3. the paired gap between persistent CUDA tensors and persistent alias
   tensors (the same tensor objects every call): whether an alias is slower
   for FlagGems as such.
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import statistics
import sys

import torch

sys.path.insert(0, "benchmarks")
from overhead import paired_calls_us  # noqa: E402

import torch_fl  # noqa: E402
from torch_fl import routing  # noqa: E402
from torch_fl.backends.flaggems import LOADER  # noqa: E402

CALLS = 4000
PAIRS = 6000


def profile(label: str, fn) -> None:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(CALLS):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    stats = pstats.Stats(prof)
    print(f"--- {label}: {stats.total_tt / CALLS * 1e6:.1f} us per call under cProfile, top by own time")
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:14]
    for (file, line, name), (_, ncalls, tottime, cumtime, _) in rows:
        where = f"{file.rsplit('/', 2)[-2:] if '/' in file else file}:{line}"
        per_call = f"{tottime / CALLS * 1e6:7.2f} us own {cumtime / CALLS * 1e6:7.2f} us cum"
        print(f"  {per_call}  {ncalls / CALLS:5.1f}x  {name}  {where}")


def gap(label: str, first, second) -> None:
    device = torch.device("cuda", 0)
    one, two = paired_calls_us(first, second, device, PAIRS)
    diffs = sorted(t - o for o, t in zip(one, two, strict=True))
    q1, q3 = diffs[len(diffs) // 4], diffs[3 * len(diffs) // 4]
    print(
        f"  {label:<62} {statistics.median(diffs):+6.2f} us (quartiles {q1:+.2f} to {q3:+.2f});"
        f" first {statistics.median(one):6.1f} us, second {statistics.median(two):6.1f} us",
        flush=True,
    )


def main() -> int:
    gems = torch_fl.backends.get("flaggems")
    if not gems.available():
        print("flaggems unavailable:", gems.unavailable_reason())
        return 1
    g = torch.Generator().manual_seed(0)
    a_cpu, b_cpu = torch.randn(4, 4, generator=g), torch.randn(4, 4, generator=g)
    a, b = a_cpu.cuda(), b_cpu.cuda()
    fa, fb = a_cpu.to("flagos"), b_cpu.to("flagos")
    na, nb = torch_fl.as_native(fa), torch_fl.as_native(fb)  # persistent alias objects
    for op, kwargs, routed in (
        ("add.Tensor", {"alpha": 1}, lambda: fa + fb),
        ("mul.Tensor", {}, lambda: fa * fb),
    ):
        fn = LOADER.table[op]
        print(f"=== {op} -> {fn.__module__}.{fn.__qualname__}", flush=True)
        with routing.route({op: "flaggems"}):
            direct = lambda fn=fn, k=kwargs: fn(a, b, **k)  # noqa: E731
            profile(f"{op} direct", direct)
            profile(f"{op} routed", routed)
            gap("routed vs direct (gc on)", direct, routed)
            gc.collect()
            gc.disable()
            try:
                gap("routed vs direct (gc off)", direct, routed)
            finally:
                gc.enable()
            gap(
                "direct: persistent alias objects vs persistent CUDA tensors",
                direct,
                lambda fn=fn, k=kwargs: fn(na, nb, **k),
            )
            gap(
                "direct: fresh alias objects vs persistent alias objects",
                lambda fn=fn, k=kwargs: fn(na, nb, **k),
                lambda fn=fn, k=kwargs: fn(torch_fl.as_native(fa), torch_fl.as_native(fb), **k),
            )
    print("gc thresholds", gc.get_threshold(), "counts", gc.get_count())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
