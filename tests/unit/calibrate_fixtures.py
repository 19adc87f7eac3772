"""What the calibrate tests (tests/unit/test_calibrate_*.py) share: rules added to the file layer, call counts,
a stand-in FlagGems, and the fake timers (per call and per workload) that make calibrate's decisions follow
from given times, not from how fast anything runs here.

A test module that runs calibrate imports `routed_is_faster` (autouse) with the rest: calibrate's default
workload timer is then the fake one.
"""

from __future__ import annotations

import pytest
import torch

from tests.unit.routing_fixtures import flag_gems_with, routing_state  # noqa: F401  (fixtures)
from torch_fl import routing
from torch_fl.backends import flaggems
from torch_fl.calibration import confirm
from torch_fl.routing import config, planner
from torch_fl.routing.state import STATE


def use_rules(text: str) -> list[config.Rule]:
    """Add `text`'s rules to the file layer, replacing those of an earlier call (the routing_state fixture
    restores the layer)."""
    parsed = config.parse_text(text, "test.conf")
    with planner.changing():
        STATE.file_rules = [*(r for r in STATE.file_rules if r.file != "test.conf"), *parsed]
        planner.apply()
    return parsed


def calls_of(op: str) -> dict[str, int]:
    return {s.backend: s.calls for s in routing.stats() if s.op == op}


@pytest.fixture
def gems(routing_state):  # noqa: F811
    yield lambda **fns: flaggems.LOADER.use_module(flag_gems_with(fns))
    flaggems.LOADER.reset()


def workload_timer(cost: dict[str, float], calls: list | None = None):
    """A fake workload timer: 1 s per run, plus cost[op] for each call of op that ran off native (negative:
    faster); `calls` collects which routing each run had (the routed ops' backends)."""

    def timer(fn):
        routing.reset_stats()
        fn()
        off = [s for s in routing.stats() if s.backend != "native"]
        if calls is not None:
            calls.append(sorted({s.op for s in off}))
        return 1.0 + sum(cost.get(s.op, -1e-3) * s.calls for s in off)

    return timer


@pytest.fixture(autouse=True)
def routed_is_faster(monkeypatch):
    """calibrate's default workload timer, faked: every call routed off native makes the workload faster."""
    monkeypatch.setattr(confirm, "synchronized_timer", lambda device: workload_timer({}))


def fake_timer(fast_from: int):
    """The candidate takes 1 us from `fast_from` elements up and 20 us below; native always 10 us."""

    def timer(run, call, backend):
        run()
        if backend == "native":
            return 10e-6
        return 1e-6 if call.numel >= fast_from else 20e-6

    return timer


def workload():
    for n in (4, 8, 16, 32):
        x = torch.ones(n, n, device="flagos")
        for _ in range(2):
            x @ x
