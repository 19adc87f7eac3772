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
