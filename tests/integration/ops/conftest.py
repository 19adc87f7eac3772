"""Per-operator tests: platform skips and parametrization (helpers in opcheck.py).

* Tests marked `cuda`, `flaggems` or `flaggems_python` are skipped, with the
  reason, on a machine that cannot run them.
* A test class with a `spec` (an opcheck.OpSpec) gets its `case` argument
  parametrized over the spec's cases and its `backend` argument over the
  backends a dispatch test can name (each backend carrying its marker).
* The tests that run an operator whose kernel FlagGems autotunes (OpSpec
  flaggems_autotunes) on a FlagGems route are marked `flaggems_autotune`
  (minutes each on the H200: scripts/gpu_check.sh can run them apart), and
  their comparison tests start first, one (operator, dtype) per xdist worker.
"""

from __future__ import annotations

import os

import pytest

from tests.integration.ops.opcheck import BACKEND_PARAMS, HAS_FLAGGEMS, ON_CUDA

_SKIPS = {
    "cuda": (not ON_CUDA, "needs flagos backed by a CUDA GPU"),
    "flaggems": (not HAS_FLAGGEMS, "needs flag_gems and a GPU it supports"),
    "flaggems_python": (not HAS_FLAGGEMS, "needs flag_gems and a GPU it supports"),
}


def _autotunes(item) -> bool:
    spec = getattr(item.cls, "spec", None)
    on_flaggems = "flaggems" in item.keywords or "flaggems_python" in item.keywords
    return on_flaggems and getattr(spec, "flaggems_autotunes", False)


def _spread_autotuned(items) -> None:
    """Puts the FlagGems comparison tests of each (operator, dtype) that
    FlagGems autotunes at the start of one xdist worker's share of the run.

    FlagGems' Hopper matmuls autotune over ~200 Triton configs per kernel on
    the first call of a dtype, for minutes on the H200: started late, such a
    test holds up the tests queued behind it past the run's deadline.
    pytest-xdist's worksteal scheduler (scripts/gpu_check.sh uses it) hands
    each worker a contiguous share of the list at the start;
    with one (operator, dtype) at the head of each share, the compiles start
    at once, in parallel, each done by one worker, and idle workers steal the
    rest of that share. (The older load scheduler starts with smaller chunks:
    there the groups still run early, if not all at once.)
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    groups: dict = {}
    rest = []
    for item in items:
        case = getattr(getattr(item, "callspec", None), "params", {}).get("case")
        if case is not None and _autotunes(item):
            groups.setdefault((item.cls.spec.overload, case.dtype), []).append(item)
        else:
            rest.append(item)
    if workers <= 1 or not groups:
        return
    heads = [[] for _ in range(workers)]
    for i, group in enumerate(groups.values()):
        heads[i % workers].extend(group)
    share = len(items) // workers
    ordered, r = [], 0
    for k, head in enumerate(heads):
        fill = len(rest) - r if k == workers - 1 else max(0, share - len(head))
        ordered += head + rest[r : r + fill]
        r += fill
    items[:] = ordered


def pytest_collection_modifyitems(config, items):
    for item in items:
        for marker, (skip, reason) in _SKIPS.items():
            if skip and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))
        if _autotunes(item):
            item.add_marker(pytest.mark.flaggems_autotune)
    if not _SKIPS["flaggems"][0]:
        _spread_autotuned(items)


def pytest_generate_tests(metafunc):
    spec = getattr(metafunc.cls, "spec", None)
    if spec is None:
        return
    if "case" in metafunc.fixturenames:
        cases = spec.cases()
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", BACKEND_PARAMS)
