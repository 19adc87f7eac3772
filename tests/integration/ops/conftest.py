"""Per-operator tests: platform skips and parametrization (helpers in opcheck.py).

* Tests marked `cuda`, `flaggems` or `flaggems_python` are skipped, with the
  reason, on a machine that cannot run them.
* A test class with a `spec` (an opcheck.OpSpec) gets its `case` argument
  parametrized over the spec's cases and its `backend` argument over the
  backends a dispatch test can name (each backend carrying its marker).
* FlagGems tests of operators whose kernels FlagGems autotunes (OpSpec
  flaggems_autotunes) run first.
"""

from __future__ import annotations

import pytest

from tests.integration.ops.opcheck import BACKEND_PARAMS, HAS_FLAGGEMS, ON_CUDA

_SKIPS = {
    "cuda": (not ON_CUDA, "needs flagos backed by a CUDA GPU"),
    "flaggems": (not HAS_FLAGGEMS, "needs flag_gems and a GPU it supports"),
    "flaggems_python": (not HAS_FLAGGEMS, "needs flag_gems and a GPU it supports"),
}


def _autotunes(item) -> bool:
    spec = getattr(item.cls, "spec", None)
    return "flaggems" in item.keywords and getattr(spec, "flaggems_autotunes", False)


def pytest_collection_modifyitems(config, items):
    for item in items:
        for marker, (skip, reason) in _SKIPS.items():
            if skip and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))
    # FlagGems' Hopper matmuls autotune over ~200 Triton configs on the first
    # call of each dtype: one mm test took 359 s on the H200 in a full run,
    # and started late it held up the tests queued behind it past the run's
    # deadline. Started first, that time overlaps everything else.
    if not _SKIPS["flaggems"][0]:
        items.sort(key=lambda item: not _autotunes(item))  # stable: the rest keep their order


def pytest_generate_tests(metafunc):
    spec = getattr(metafunc.cls, "spec", None)
    if spec is None:
        return
    if "case" in metafunc.fixturenames:
        cases = spec.cases()
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", BACKEND_PARAMS)
