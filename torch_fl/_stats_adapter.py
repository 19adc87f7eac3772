"""Routing call statistics for the demo and the benchmarks, in one place.

Contract (torch_fl.routing): stats() -> [OpStat(op, backend, calls, fallbacks,
failures)], reset_stats(). In a build without the routing layer the core's
raw counters (_C._route_stats(): (op, "native"|"cpu_fallback", calls)) are
adapted to the same shape; `_routing()` is the one switch.
"""

from __future__ import annotations

from typing import NamedTuple

import torch_fl


class OpStat(NamedTuple):
    op: str
    backend: str
    calls: int
    fallbacks: int
    failures: int


def _routing():
    try:
        from torch_fl import routing
    except ImportError:
        return None
    return routing if hasattr(routing, "stats") else None


def source() -> str:
    """Where the numbers come from: "torch_fl.routing" or "core counters"."""
    return "torch_fl.routing" if _routing() is not None else "core counters"


def config_file() -> str | None:
    """The routing file in effect (None without the routing layer)."""
    routing = _routing()
    return routing.config_file() if routing is not None and hasattr(routing, "config_file") else None


def reset() -> None:
    routing = _routing()
    if routing is not None:
        routing.reset_stats()
    else:
        torch_fl._C._reset_route_stats()


def stats() -> list[OpStat]:
    """Per-operator call counts, most called first."""
    routing = _routing()
    if routing is not None:
        rows = [OpStat(s.op, s.backend, s.calls, s.fallbacks, s.failures) for s in routing.stats()]
    else:
        rows = [
            OpStat(op, kind, calls, calls if kind == "cpu_fallback" else 0, 0)
            for op, kind, calls in torch_fl._C._route_stats()
        ]
    rows = [r for r in rows if r.calls or r.fallbacks or r.failures]
    return sorted(rows, key=lambda r: (-r.calls, r.op))


def fallbacks(rows: list[OpStat] | None = None) -> list[OpStat]:
    rows = stats() if rows is None else rows
    return [r for r in rows if r.fallbacks or r.failures or r.backend == "cpu_fallback"]


def backends_used(rows: list[OpStat] | None = None) -> dict[str, int]:
    """Calls per backend name."""
    rows = stats() if rows is None else rows
    out: dict[str, int] = {}
    for r in rows:
        out[r.backend] = out.get(r.backend, 0) + r.calls
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))
