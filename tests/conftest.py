"""Shared test setup: platform detection and the FEP markers.

Tests marked `cuda`, `flaggems`, `flaggems_python` or `ascend` are skipped,
with the reason, on a machine that cannot run them; `anyplatform` runs
everywhere (host-memory backing in CI, CUDA on a GPU).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

import torch_fl

ON_CUDA = torch_fl.backing() == "cuda"
HAS_FLAGGEMS = ON_CUDA and importlib.util.find_spec("flag_gems") is not None
NATIVE = torch.device("cuda", 0) if ON_CUDA else torch.device("cpu")

_SKIPS = {
    "cuda": (not ON_CUDA, "needs flagos backed by a CUDA GPU"),
    "flaggems": (not HAS_FLAGGEMS, "needs flag_gems and a GPU"),
    "flaggems_python": (not HAS_FLAGGEMS, "needs flag_gems and a GPU"),
    "ascend": (True, "needs an Ascend NPU (backing not implemented yet)"),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        for marker, (skip, reason) in _SKIPS.items():
            if skip and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))
