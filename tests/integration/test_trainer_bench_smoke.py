"""benchmarks/trainer_bench.py end to end at --tiny sizes: two worker processes each run a Hugging Face Trainer
(native on the CPU, or cuda on a GPU, never importing torch_fl; flagos on flagos), take turns for the timed
samples, and the report has both loss curves, their agreement and the paired step times."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks import common
from benchmarks import report as report_page
from tests.helpers import REPO

pytest.importorskip("transformers")

STEPS = 8


@pytest.mark.anyplatform
def test_trainer_benchmark_tiny(tmp_path):
    cmd = [sys.executable, "-m", "benchmarks.trainer_bench", "--tiny", "--pairs", "2"]
    cmd += ["--steps", str(STEPS), "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    # --out a folder: the canonical name inside it, trainer-<machine>.json
    path = tmp_path / common.canonical_path("trainer").name
    assert [p.name for p in tmp_path.glob("*.json")] == [path.name]
    report = json.loads(path.read_text())
    meta = report["meta"]
    assert meta["benchmark"] == "trainer" and meta["command"].startswith("python -m benchmarks.trainer_bench ")
    assert meta["versions"]["transformers"] and "errors" not in report, report.get("errors")
    assert report["config"]["model"] == "tiny" and report["config"]["bf16"] is False
    native, flagos = report["variants"]["native"], report["variants"]["flagos"]
    # Trainer chose each device itself; the native worker never imported torch_fl
    assert native["device"].split(":")[0] in ("cpu", "cuda") and native["torch_fl_imported"] is False
    assert flagos["device"].startswith("flagos") and flagos["args_device"].startswith("flagos")
    assert flagos["peak_bytes"] > 0
    assert len(native["losses"]) == len(flagos["losses"]) == STEPS
    # fp32, the same kernels on the host: the curves agree to the last digits (and to 1e-4 on a GPU)
    agree = report["loss_agreement"]
    assert agree["steps"] == STEPS and agree["within_all"] is True and agree["within_first_20"] is True
    assert flagos["losses"] == pytest.approx(native["losses"], rel=1e-4)
    speed = report["speed"]
    assert speed["pairs"] == 2 and len(speed["ratios"]) == 2 and speed["steps_per_sample"] == 2
    assert len(speed["native_ms"]) == len(speed["flagos_ms"]) == 2 and min(speed["flagos_ms"]) > 0
    q1, q3 = speed["ratio_quartiles"]
    assert q1 <= q3 and speed["noise"] == pytest.approx((q3 - q1) / 2, abs=1e-4)
    # and the generated page renders it
    page = report_page.benchmarks_md({path.stem: report})
    assert f"## {path.stem}: Hugging Face Trainer fine-tune" in page and "| yes / yes |" in page
