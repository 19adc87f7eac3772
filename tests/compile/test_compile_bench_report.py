"""benchmarks/compile_bench.py's results in the generated benchmarks page and README targets."""

from __future__ import annotations

import pytest

from tests.helpers import load_benchmark

pytestmark = pytest.mark.anyplatform


def _result(prefill: float, train: float) -> dict:
    meta = {
        "benchmark": "compile",
        "machine": "h200",
        "command": "python benchmarks/compile_bench.py",
        "date": "2026-01-01T00:00:00Z",
        "commit": "abc1234",
        "dirty": False,
        "versions": {},
    }
    return {
        "meta": meta,
        "sizes": {"variant": "0.6b", "dtype": "bfloat16", "prefill": [8, 512], "train": [4, 512]},
        "prefill": {"pairs": 12, "ratio_median": prefill, "noise": 0.01, "compile_s": {"native": 40.0, "flagos": 41.5}},
        "train": {"pairs": 4, "ratio_median": train, "noise": 0.02, "compile_s": {"native": 90.0, "flagos": 95.0}},
    }


def test_compile_results_give_a_table_and_two_targets():
    report = load_benchmark("report")
    results = {"compile-h200": _result(0.99, 0.95)}
    page = report.benchmarks_md(results)
    assert "## compile-h200: torch.compile" in page
    assert "| prefill (12 pairs) | 0.990x ± 0.010 | 40.0 | 41.5 |" in page
    assert "| training step (4 rounds) | 0.950x ± 0.020 | 90.0 | 95.0 |" in page
    rows = {t: (m, ok) for t, m, ok, _ in report.targets(results)}
    assert rows["compiled Qwen3-0.6B prefill >= 0.97x compiled native"][1] is True
    assert rows["compiled Qwen3-0.6B training step >= 0.97x compiled native"] == ("0.950x ± 0.020 (4 rounds)", False)
