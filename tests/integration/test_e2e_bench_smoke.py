"""benchmarks/e2e.py runs end to end (one quick round, tiny model) and writes a complete report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.anyplatform
def test_e2e_benchmark_quick(tmp_path):
    cmd = [sys.executable, str(REPO / "benchmarks" / "e2e.py"), "--model", "tiny", "--quick", "--rounds", "1"]
    cmd += ["--variants", "native,flagos", "--out", str(tmp_path), "--name", "smoke", "--paired", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "smoke.json").read_text())
    assert "e2e.py" in report["command"] and "--quick" in report["argv"]
    assert report["variants"] == ["native", "flagos"]
    for variant in ("native", "flagos"):
        for task in ("decode", "prefill", "train"):
            entry = report["summary"][variant][task]
            assert "errors" not in entry, entry
            assert entry["rounds_ok"] == 1 and entry["tokens_per_s"] > 0
    flagos = report["summary"]["flagos"]
    assert flagos["decode"]["tokens_match_native"] is True
    assert flagos["train"]["peak_bytes"] > 0
    assert flagos["decode"]["fallback_ops"] == []
    assert sum(flagos["decode"]["backends"].values()) > 0  # routing stats were collected in the child
    native_raw = [r for r in report["raw"] if r["variant"] == "native"]
    assert native_raw and all(r["torch_fl_imported"] is False for r in native_raw)
    # --paired: native and flagos alternating in one child, per-pair ratios
    paired = report["paired"]
    assert paired["variant"] == "paired" and "error" not in paired, paired
    for task in ("decode", "prefill"):
        entry = paired["tasks"][task]
        assert entry["pairs"] == 2 and len(entry["ratios"]) == 2 and entry["ratio_median"] > 0
        assert entry["native_tokens_per_s"] > 0 and entry["flagos_tokens_per_s"] > 0
    assert paired["tasks"]["decode"]["tokens_match_native"] is True
    assert "train" not in paired["tasks"]  # native CUDA backward cannot share a process with torch_fl
    # --replot draws the chart of a written report again, where matplotlib is installed
    png = tmp_path / "smoke.png"
    png.unlink(missing_ok=True)
    replot = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "e2e.py"), "--replot", str(tmp_path / "smoke.json")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert replot.returncode == 1 and "matplotlib is not installed" in replot.stderr
    else:
        assert replot.returncode == 0, replot.stderr[-2000:]
        assert png.stat().st_size > 0
