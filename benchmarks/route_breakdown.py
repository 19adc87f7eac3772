"""Where a routed call's host time goes: overhead.py's gaps split into parts, each timed in host microseconds
per call in the same run: PyRoute with a Python kernel, the native route's parts, FlagGems calls direct and
routed (each step between them in ABBA pairs), mm through torch.mm and @.

    python -m benchmarks.route_breakdown [--calls N] [--out PATH]
"""

from __future__ import annotations

import statistics
from array import array

import torch

import torch_fl
from benchmarks import common
from torch_fl.routing.types import CoreTarget


def per_call_us(fn, device, calls: int, rounds: int = 5) -> float:
    """Median over rounds of overhead.per_call_us (host microseconds per call), after 200 calls of warm-up."""
    from benchmarks.overhead import per_call_us as one_round

    for _ in range(200):
        fn()
    return statistics.median(one_round(fn, device, calls) for _ in range(rounds))


def _gems_ops(table: dict, fa, fb) -> list[tuple]:
    """(op, its flag_gems function, the routed call on flagos tensors, the keywords the dispatcher passes)."""
    ops = (("add", lambda: fa + fb, {"alpha": 1}), ("mul", lambda: fa * fb, {}))
    return [(op, table[f"{op}.Tensor"], routed, kw) for op, routed, kw in ops if table.get(f"{op}.Tensor")]


def flaggems_gaps(table: dict, a, b, fa, fb, native, pairs: int) -> dict[str, float]:
    """What a flaggems-routed add or mul adds over the direct call, step by step, each timed in ABBA pairs."""
    from benchmarks.overhead import paired_calls_us

    out = {}
    for op, direct, routed, kwargs in _gems_ops(table, fa, fb):
        fresh = lambda d=direct, k=kwargs: d(torch_fl.as_native(fa), torch_fl.as_native(fb), **k)  # noqa: E731
        persistent = lambda d=direct, k=kwargs: d(a, b, **k)  # noqa: E731
        steps = [(f"flag_gems {op}: fresh alias tensors instead of persistent ones", persistent, fresh)]
        steps.append((f"flag_gems {op}: routed from flagos instead of direct on fresh aliases", fresh, routed))
        if kwargs:
            name = f"flag_gems {op}: alpha=1 passed instead of left out"
            steps.append((name, lambda d=direct: d(a, b), lambda d=direct, k=kwargs: d(a, b, **k)))
        with torch_fl.routing.route({f"{op}.Tensor": "flaggems_python"}):
            for _ in range(200):
                routed()
            for name, first, second in steps:
                one, two = paired_calls_us(first, second, native, pairs)
                out[name] = statistics.median(t - o for o, t in zip(one, two, strict=True))
    return out


def _kernel_target(fn) -> CoreTarget:
    """`fn` as the one target of a bare PyRoute, without routing's policy."""

    def reraise(exc, dtype, args, kwargs):
        raise exc

    return CoreTarget("kernel", "breakdown", fn, reraise, None, array("q", [0, 0, 0]))


def main(argv=None) -> int:
    p = common.parser(__doc__, "route-breakdown")
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args(argv)
    native = torch.device("cuda" if torch_fl.backing() == "cuda" else "cpu")
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4, 4, generator=g).to(native), torch.randn(4, 4, generator=g).to(native)
    # Allocated on flagos, as a model's tensors are (overhead.py's flaggems rows say why).
    fa, fb = a.to("flagos"), b.to("flagos")
    rows: dict[str, float] = {}

    def row(name: str, fn) -> None:
        rows[name] = per_call_us(fn, native, args.calls)

    def nothing(x, y, alpha=1):
        return x

    from benchmarks.overhead import paired_calls_us

    na, nb = torch_fl.as_native(fa), torch_fl.as_native(fb)  # persistent aliases
    route = torch_fl._C.PyRoute("add.Tensor")
    try:
        route.update(_kernel_target(nothing))
        row("python kernel that does nothing, called directly", lambda: nothing(a, b, alpha=1))
        row("python kernel that does nothing, routed (PyRoute)", lambda: fa + fb)
        # The same function routed and called directly on persistent aliases, call by call in pairs
        one, two = paired_calls_us(lambda: nothing(na, nb, alpha=1), lambda: fa + fb, native, args.calls * 10)
        gap = statistics.median(t - o for o, t in zip(one, two, strict=True))
        rows["python kernel that does nothing: routed vs direct, per pair"] = gap
    finally:
        route.set_native()
    row("add on the native route", lambda: fa + fb)
    row("add native", lambda: a + b)
    row("add native, on aliases of flagos tensors", lambda: na + nb)
    ia, ifa = a.clone(), fa.clone()
    row("add_ in place, native", lambda: ia.add_(b))
    row("add_ in place, native route", lambda: ifa.add_(fb))
    row("empty 4x4, native", lambda: torch.empty(4, 4, device=native))
    row("empty 4x4, flagos", lambda: torch.empty(4, 4, device="flagos"))
    row("view, native", lambda: a.view(16))
    row("view, flagos", lambda: fa.view(16))

    try:
        from torch_fl.backends.flaggems import LOADER

        gems_mul = LOADER.table.get("mul.Tensor") if torch_fl.backends.get("flaggems").available() else None
    except Exception as e:  # noqa: BLE001 - reported, not fatal: the other rows stand
        print(f"  flaggems rows skipped: {e}")
        gems_mul = None
    if gems_mul is None:
        print("  flaggems rows skipped: flag_gems is not available here")
    else:
        row("flag_gems mul, direct, persistent CUDA tensors", lambda: gems_mul(a, b))
        row("flag_gems mul, direct, fresh alias tensors per call", lambda: gems_mul(torch_fl.as_native(fa), b))
        with torch_fl.routing.route({"mul.Tensor": "flaggems_python"}):
            row("flag_gems mul, routed from flagos (flaggems_python)", lambda: fa * fb)
        with torch_fl.routing.route({"mul.Tensor": "flaggems"}):
            row("flag_gems mul, routed from flagos (flaggems replay)", lambda: fa * fb)
        rows.update(flaggems_gaps(LOADER.table, a, b, fa, fb, native, args.calls * 5))

    m1, m2 = torch.randn(64, 64, generator=g).to(native), torch.randn(64, 64, generator=g).to(native)
    f1, f2 = m1.to("flagos"), m2.to("flagos")
    row("mm 64x64 native, torch.mm", lambda: torch.mm(m1, m2))
    row("mm 64x64 flagos, torch.mm", lambda: torch.mm(f1, f2))
    row("mm 64x64 native, @", lambda: m1 @ m2)
    row("mm 64x64 flagos, @", lambda: f1 @ f2)
    out = common.write("route-breakdown", {"backing": torch_fl.backing(), "us_per_call": rows}, args.out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
