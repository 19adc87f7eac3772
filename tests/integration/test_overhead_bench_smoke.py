"""benchmarks/overhead.py runs end to end (quick sizes) and reports every row, the in-context ones included."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.anyplatform
def test_overhead_benchmark_quick(tmp_path):
    pytest.importorskip("transformers")  # the tiny Qwen3 row
    out = tmp_path / "overhead.json"
    cmd = [sys.executable, "-m", "benchmarks.overhead", "--quick", "--small-only", "--rounds", "2"]
    proc = subprocess.run(cmd + ["--out", str(out)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["rounds"] == 2 and report["meta"]["command"].startswith("python -m benchmarks.overhead --quick")
    assert report["meta"]["benchmark"] == "overhead" and report["meta"]["versions"]["torch"]
    rows = {r["name"]: r for r in report["results"]}
    assert {"add 4x4", "add 4x4 in inference mode", "mul 4x4", "mm 64x64", "softmax 32x128"} <= set(rows)
    layer = next(r for name, r in rows.items() if name.startswith("decoder-layer mix"))
    decode = next(r for name, r in rows.items() if name.startswith("tiny Qwen3 greedy decode"))
    # the routed-call counts come from routing stats: a layer routes dozens of calls, a token over a hundred
    assert int(re.search(r"\((\d+) calls\)", layer["name"]).group(1)) >= 20
    assert int(re.search(r"\((\d+) calls/token\)", decode["name"]).group(1)) >= 50
    for row in (layer, decode):
        assert row["unit"] == "us/call" and row["native"] > 0 and row["flagos"] > 0
        assert len(row["round_diffs"]) == 2


@pytest.mark.anyplatform
def test_paired_calls_alternate_and_time_each_call():
    """The call-by-call pairing behind the flaggems rows: ABBA order, one time per call of each."""
    import torch

    from benchmarks import overhead

    # a clock that the two functions advance by known amounts: 1 s for the first, 5 s for the second
    now = [0.0]
    order = []

    def first():
        order.append("a")
        now[0] += 1

    def second():
        order.append("b")
        now[0] += 5

    a, b = overhead.paired_calls_us(first, second, torch.device("cpu"), pairs=6, clock=lambda: now[0])
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a", "a", "b", "b", "a"]
    assert a == [1e6] * 6 and b == [5e6] * 6  # each call's own time, in microseconds


@pytest.mark.anyplatform
def test_replot_draws_the_chart_of_a_written_report(tmp_path):
    """--replot draws the chart of a JSON a GPU run returned (its PNG left behind) again, beside it,
    or says that matplotlib is missing and fails."""
    report = {
        "command": "python -m benchmarks.overhead",
        "environment": {"device": "NVIDIA H200 (flagos over cuda)", "backing": "cuda"},
        "rounds": 7,
        "calls": 2000,
        "results": [
            {
                "name": "add 4x4",
                "unit": "us/call",
                "native": 7.0,
                "flagos": 7.2,
                "round_diffs": [0.2],
                "paired_added_us": None,
                "ratio": 1.03,
                "added_us": 0.2,
            },
            {
                "name": "add 256M fp32 (bandwidth)",
                "unit": "GB/s",
                "native": 4300.0,
                "flagos": 4301.0,
                "round_diffs": None,
                "paired_added_us": None,
                "ratio": 1.0,
                "added_us": None,
            },
        ],
    }
    path = tmp_path / "overhead_cuda.json"
    path.write_text(json.dumps(report))
    cmd = [sys.executable, "-m", "benchmarks.overhead", "--replot", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
    png = tmp_path / "overhead_cuda.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert proc.returncode == 1 and "matplotlib is not installed" in proc.stderr
        assert not png.exists()
    else:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"wrote {png}" in proc.stdout
