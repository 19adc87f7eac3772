"""Summaries of torch_fl.routing.stats() for the demo and the benchmarks."""

from __future__ import annotations

from torch_fl import routing


def stats() -> list:
    """Per-operator call counts (routing.OpStat rows with any activity), most called first."""
    rows = [r for r in routing.stats() if r.calls or r.fallbacks or r.failures]
    return sorted(rows, key=lambda r: (-r.calls, r.op))


def fallbacks(rows: list | None = None) -> list:
    """Rows where a route fell back or failed, or the CPU fallback ran."""
    rows = stats() if rows is None else rows
    return [r for r in rows if r.fallbacks or r.failures or r.backend == "cpu_fallback"]


def backends_used(rows: list | None = None) -> dict[str, int]:
    """Calls per backend name, most first."""
    rows = stats() if rows is None else rows
    out: dict[str, int] = {}
    for r in rows:
        out[r.backend] = out.get(r.backend, 0) + r.calls
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def non_native_ops(rows: list | None = None) -> dict[str, list[str]]:
    """Operators that ran on another backend than native (FlagGems, the CPU fallback), per backend."""
    rows = stats() if rows is None else rows
    out: dict[str, list[str]] = {}
    for r in rows:
        if r.backend != "native" and r.calls:
            out.setdefault(r.backend, []).append(r.op)
    return out
