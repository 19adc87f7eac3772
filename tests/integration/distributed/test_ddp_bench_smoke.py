"""benchmarks/ddp_step.py runs end to end (--smoke) and reports both sides and their ratio, and
report.py renders its result file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks import report as report_page
from tests.integration.distributed.launch import REPO, needs_devices

pytestmark = pytest.mark.anyplatform


def test_ddp_step_benchmark_smoke(tmp_path):
    needs_devices(1)
    out = tmp_path / "ddp-step.json"
    cmd = [sys.executable, "-m", "benchmarks.ddp_step", "--smoke", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["meta"]["benchmark"] == "ddp-step" and report["meta"]["command"].startswith(
        "python -m benchmarks.ddp_step --smoke"
    )
    sides = report["sides"]
    assert sides["flagos"]["backing"] == sides["native"]["backing"]
    assert len(sides["flagos"]["round_medians_ms"]) == len(sides["native"]["round_medians_ms"]) == 2
    # the same seeded model and data on both sides: the same loss after the same steps
    assert abs(sides["flagos"]["loss"] - sides["native"]["loss"]) < 1e-4
    assert report["ratio"]["pairs"] == 2 and report["ratio"]["ratio_median"] > 0
    text = "\n".join(report_page.TABLES["ddp-step"](report))
    assert "| flagos |" in text and "| native |" in text
