"""Operator conformance: PyTorch's OpInfo samples on flagos, compared with CPU.

`python -m torch_fl.conformance --help` runs the sweep; `python -m
torch_fl.conformance report ...` turns its JSON into docs/operator-support.md.
`run_sweep(...)` is the same sweep as a function (used by the CI subset test).
"""

from __future__ import annotations

from types import SimpleNamespace

from torch_fl.conformance.runner import OpResult, load_op_db, op_key, run_op
from torch_fl.conformance.sweep import FIRST_PHASE_OVERLOADS, SUBSET_CI, select_ops, summarize


def run_sweep(patterns=None, *, backend="native", dtypes=None, limit=None, backward=False, jobs=0, timeout=300.0):
    """Run the sweep over the ops matching `patterns`; return {op: result dict}.

    jobs=0 runs in this process; jobs>0 uses that many guarded worker processes.
    """
    from torch_fl.conformance import sweep as _sweep

    cfg = SimpleNamespace(
        backend=backend,
        dtypes=dtypes,
        limit=limit,
        backward=backward,
        jobs=jobs,
        timeout=timeout,
        startup_timeout=120.0,
        threads=1 if jobs > 1 else 0,
        route_ops=list(FIRST_PHASE_OVERLOADS),
        stop_at=float("inf"),  # no deadline
    )
    ops = select_ops(load_op_db(), patterns)
    if jobs == 0:
        results, _ = _sweep.run_in_process(ops, cfg, lambda key, out: None)
        return results
    return _sweep.run_in_workers([op_key(o) for o in ops], cfg, lambda key, out: None, {})


__all__ = [
    "FIRST_PHASE_OVERLOADS",
    "SUBSET_CI",
    "OpResult",
    "load_op_db",
    "op_key",
    "run_op",
    "select_ops",
    "summarize",
    "run_sweep",
]
