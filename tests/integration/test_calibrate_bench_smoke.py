"""benchmarks/calibrate_models.py: runs calibrate per model end to end, and reads back what each routing file says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import report
from benchmarks.calibrate_models import parse

REPO = Path(__file__).resolve().parents[2]

# A calibrated file as torch_fl/calibration writes one: a class routed and confirmed, one left native.
CALIBRATED = """# flagos routing measured by `python -m torch_fl calibrate` (docs/routing.md, Measured routing).
# recorded 900 flagos calls; 400 of them in 12 signatures of 5 operators flaggems has
# measured 12 signatures (1 rejected: flaggems's result not accepted); 1 of 4 classes go to flaggems
# estimated time saved per run: 0.420 ms of 9.000 ms in the measured operators
# confirmed on the workload: 1 class routed: 1.061x the workload's speed with none (noise 0.004)

include builtin:backends_cuda.conf

native_layer_norm[float32, numel>=65536] = flaggems   # calibrated: native 30.0 us, flaggems 20.0 us (1.50x), 24 calls, 1 shape, numel 98304
mul.Tensor[bfloat16] = native          # calibrated: native 9.5 us, flaggems 9.7 us (0.98x), 100 calls, 6 shapes, numel 1024..65536
_log_softmax_backward_data[float32] = native     # calibrated: native 1242.6 us; flaggems rejected: the call fell back to native; 1 call, 1 shape, numel 311164928
"""  # noqa: E501


def test_a_calibrated_file_reads_back_as_its_rules_and_confirmation():
    got = parse(CALIBRATED)
    assert got["confirmed"] and got["workload_ratio"] == 1.061 and got["workload_noise"] == 0.004
    assert got["routed"] == ["native_layer_norm[float32, numel>=65536]"]
    rules = {r["rule"]: r for r in got["rules"]}
    assert rules["native_layer_norm[float32, numel>=65536]"]["speedup"] == 1.5
    assert rules["mul.Tensor[bfloat16]"] == {
        "rule": "mul.Tensor[bfloat16]",
        "backend": "native",
        "native_us": 9.5,
        "candidate_us": 9.7,
        "speedup": 0.98,
        "detail": "100 calls, 6 shapes, numel 1024..65536",
    }
    assert rules["_log_softmax_backward_data[float32]"]["candidate_us"] is None  # rejected: not timed
    row = report._calibrate_row("bert", {**got, "file": "f"})
    assert row[:3] == ["bert", "1", "1.061x ± 0.004 (confirmed)"]
    assert row[3] == "1 of 3: native_layer_norm[float32, numel>=65536] 1.50x"
    # a model measured at the file's commit is not labelled; one of another run (--keep) names its commit
    measured = {**got, "file": "f", "commit": "abc1234", "dirty": False}
    assert report._calibrate_row("bert", measured, "abc1234")[0] == "bert"
    assert report._calibrate_row("bert", measured, "def5678")[0] == "bert (at abc1234)"


@pytest.mark.anyplatform
def test_the_readme_target_takes_each_models_confirmed_workload_and_native_for_a_file_with_none():
    from benchmarks.targets import calibrate_targets

    def model(ratio, confirmed):
        return {"workload_ratio": ratio, "workload_noise": 0.01, "confirmed": confirmed}

    d = {"models": {"gpt2": model(1.056, True), "0.6b": model(0.962, False)}}
    ((target, text, met, src),) = calibrate_targets(d)
    assert met and src == "calibrate" and ">= 1.05x" in target
    assert text == "gpt2 1.056x ± 0.010, 0.6b all native (no class confirmed)"
    d["models"]["gpt2"] = model(1.03, True)  # no workload gains 5 %
    assert not calibrate_targets(d)[0][2]
    d["models"]["bert"] = {"error": "timed out"}
    assert calibrate_targets(d)[0][1].endswith("bert failed") and not calibrate_targets(d)[0][2]
    assert calibrate_targets(None) == []


@pytest.mark.anyplatform
def test_calibrate_benchmark_runs_each_model_and_records_its_file(tmp_path):
    pytest.importorskip("transformers")
    cmd = [sys.executable, "-m", "benchmarks.calibrate_models", "--models", "bert-tiny", "--out", f"{tmp_path}/"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (result,) = tmp_path.glob("calibrate-*.json")
    d = json.loads(result.read_text())
    assert d["meta"]["benchmark"] == "calibrate" and d["args"] == {"rounds": 3, "per_op": 16}
    r = d["models"]["bert-tiny"]
    conf = tmp_path / r["file"]
    assert conf.is_file() and parse(conf.read_text())["summary"] == r["summary"]
    assert r["summary"][0].startswith("recorded ")  # the workload ran on flagos and its calls were recorded
    import torch_fl

    if torch_fl.backing() != "cuda":  # FlagGems needs a GPU: nothing measured, and the file says so
        assert r["returncode"] == 1 and r["rules"] == [] and "flaggems is unavailable" in r["summary"][1]
