"""Measured routing on a GPU: calibrate a small workload against FlagGems for real, then run its file.

The workload mixes small and large matrix products and elementwise calls in
bfloat16 and float32. The test asserts what must hold whatever the timings
are: every recorded signature was checked and timed, the file validates, its
rules re-run the workload with every call on the backend its class names
(stats per backend), and `explain` shows the measurements. It does not assert
which backend wins (that is the measurement).
"""

from __future__ import annotations

import pytest
import torch

import torch_fl
from tests.unit.routing_fixtures import routing_state  # noqa: F401  (fixture)
from torch_fl import routing
from torch_fl.routing import config

pytestmark = [pytest.mark.flaggems, pytest.mark.cuda, pytest.mark.usefixtures("routing_state")]


def workload():
    torch.manual_seed(0)
    for dtype in (torch.bfloat16, torch.float32):
        for n in (16, 256, 2048):
            a = torch.randn(n, n, device="flagos", dtype=dtype)
            for _ in range(3):
                b = a @ a
                c = torch.add(b, a)
                torch.nn.functional.silu(c)


def test_calibrate_flaggems_and_run_the_file(tmp_path):
    out = tmp_path / "calibrated.conf"
    result = torch_fl.calibrate(workload, str(out), rounds=3, reps=5, progress=False)
    assert result.unavailable is None
    assert result.measurements, result.summary()
    ops = {m.call.key.op for m in result.measurements}
    assert {"mm", "add.Tensor"} <= ops, ops
    assert all(m.native_s > 0 and (m.candidate_s is None) == (m.reason is not None) for m in result.measurements)
    rules, problems = config.check_file(str(out))
    assert problems == []
    mine = [r for r in rules if r.file == str(out)]
    assert len(mine) == len(result.classes)

    routing.load_config(str(out))
    routing.reset_stats()
    workload()
    torch.flagos.synchronize()
    stats = {(s.op, s.backend): s for s in routing.stats()}
    for c in result.classes:
        if c.backend == "flaggems":
            assert stats[(c.op, "flaggems")].calls > 0, c.rule
            assert stats[(c.op, "flaggems")].fallbacks == 0, c.rule
    e = routing.explain("mm", "bfloat16")
    assert "measured:" in str(e), str(e)
