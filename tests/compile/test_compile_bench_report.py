"""benchmarks/compile_bench.py end to end at host sizes, and its results in the generated benchmarks page and
README targets."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import torch_fl  # noqa: F401 - the flagos device
from benchmarks import common, compile_bench
from benchmarks import report as report_page
from benchmarks import targets as targets_page
from tests.helpers import REPO

pytestmark = pytest.mark.anyplatform


def _result(prefill: float, train: float, small_gpt2: float = 0.98) -> dict:
    meta = {
        "benchmark": "compile",
        "machine": "h200",
        "command": "python -m benchmarks.compile_bench",
        "date": "2026-01-01T00:00:00Z",
        "commit": "abc1234",
        "dirty": False,
        "versions": {},
    }
    return {
        "meta": meta,
        "sizes": {"variant": "0.6b", "dtype": "bfloat16", "prefill": [8, 512], "train": [4, 512]},
        "prefill": {"pairs": 12, "ratio_median": prefill, "noise": 0.01, "compile_s": {"native": 40.0, "flagos": 41.5}},
        "train": {
            "pairs": 4,
            "ratio_median": train,
            "noise": 0.02,
            "compile_s": {"native": 90.0, "flagos": 95.0},
            "steps_per_sample": 10,
        },
        "small": {
            kind: {"pairs": 16, "ratio_median": r, "noise": 0.01, "compile_s": {"native": 5.0, "flagos": 5.5}}
            for kind, r in (("bert", 0.99), ("gpt2", small_gpt2))
        },
    }


def test_compile_results_give_a_table_and_two_targets():
    results = {"compile-h200": _result(0.99, 0.95)}
    page = report_page.benchmarks_md(results)
    assert "## compile-h200: torch.compile" in page
    assert "| prefill (12 pairs) | 0.990x ± 0.010 | 40.0 | 41.5 |" in page
    assert "| training step (4 pairs) | 0.950x ± 0.020 | 90.0 | 95.0 |" in page
    assert "alternating pairs (10 steps per sample)" in page
    rows = {t: (m, ok) for t, m, ok, _ in targets_page.targets(results)}
    assert rows["compiled Qwen3-0.6B prefill >= 0.97x compiled native"][1] is True
    assert rows["compiled Qwen3-0.6B training step >= 0.97x compiled native"] == ("0.950x ± 0.020 (4 pairs)", False)
    assert "| gpt2 inference (16 pairs) | 0.980x ± 0.010 | 5.0 | 5.5 |" in page
    small = "compiled small Hugging Face models >= 0.97x compiled native, each"
    assert rows[small] == ("bert 0.990x, gpt2 0.980x", True)
    rows = {t: (m, ok) for t, m, ok, _ in targets_page.targets({"compile-h200": _result(0.99, 0.99, 0.96)})}
    assert rows[small] == ("bert 0.990x, gpt2 0.960x", False)  # one model below misses the target


def test_compile_benchmark_quick(tmp_path):
    """The benchmark end to end at host sizes: both variants compile, pair and train."""
    out = tmp_path / "compile.json"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.compile_bench",
        "--quick",
        "--pairs",
        "2",
        "--calls",
        "2",
        "--train-pairs",
        "2",
    ]
    cmd += ["--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    pre, train = report["prefill"], report["train"]
    assert pre["pairs"] == 2 and len(pre["native_ms"]) == len(pre["flagos_ms"]) == 2 and pre["ratio_median"] > 0
    assert set(pre["compile_s"]) == {"native", "flagos"}
    assert report["args"]["calls"] == 2
    assert set(report["small"]) == {"bert", "llama"}  # the quick run's small models, each paired
    assert all(e["pairs"] == 2 and e["ratio_median"] > 0 for e in report["small"].values())
    assert "alternating pairs (2 calls per sample)" in "\n".join(report_page.TABLES["compile"](report))
    # training: each variant's worker compiled once, then alternating samples of 3 steps (--quick)
    assert train["pairs"] == 2 and train["steps_per_sample"] == 3 and train["noise"] is not None
    assert len(train["native_ms"]) == len(train["flagos_ms"]) == 2 and min(train["flagos_ms"]) > 0
    assert train["compile_s"]["native"] > 0 and train["compile_s"]["flagos"] > 0


def test_a_training_worker_that_dies_says_why(tmp_path):
    died = [
        sys.executable,
        "-c",
        "import sys; print('loading'); sys.stderr.write('boom: out of memory\\n'); sys.exit(3)",
    ]
    with pytest.raises(
        RuntimeError, match=r"train \(flagos\) worker exited 3 without a result:\n.*boom: out of memory"
    ):
        common.Worker("train (flagos)", died, dict(os.environ), tmp_path, str(tmp_path / "log"), timeout=60)


def test_a_worker_answers_one_sample_per_request(tmp_path):
    code = "import time; from benchmarks import common as c; "
    code += "c.serve(lambda: time.sleep(0.001), lambda: None, 3, {'compile_s': 1.5})"
    w = common.Worker("sleep", [sys.executable, "-c", code], None, REPO, str(tmp_path / "log"), timeout=60)
    try:
        assert w.ready == {"compile_s": 1.5}
        assert all(0.001 <= w.sample() < 1.0 for _ in range(2))
    finally:
        w.close()
    assert w.proc.returncode == 0  # stdin closed: the worker ended by itself


@pytest.mark.parametrize("kind", sorted(compile_bench.SMALL))
def test_each_small_model_of_the_benchmark_builds_and_runs_on_flagos(kind):
    # The quick run compiles two of the six: every configuration is checked here, before a GPU run compiles it.
    ids = torch.randint(0, 1024, (1, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = compile_bench._small_model(kind, "cpu", quick=True)(input_ids=ids).last_hidden_state
        got = compile_bench._small_model(kind, "flagos", quick=True)(input_ids=ids.to("flagos")).last_hidden_state
    assert got.device.type == "flagos"
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


def test_each_variant_compiles_on_a_code_object_of_its_own(monkeypatch):
    # Dynamo keeps graphs per code object. Through torch.compile(model) the variants of one model class (and BERT
    # and GPT-2, through transformers' wrappers) shared one: a call could first run, and fail, the other variant's
    # guards, and a model past the recompile limit ran eagerly, timed as compiled. Through entry functions of their
    # own: one graph per code object, with the limit at one and no reset between models.
    import argparse

    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    from torch._dynamo.utils import counters

    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 1)
    monkeypatch.setattr(torch._dynamo, "reset", lambda: None)
    args = argparse.Namespace(warmup=0, pairs=1, quick=True)
    graphs = counters["stats"]["unique_graphs"]
    for kind in ("bert", "gpt2", "bert"):
        assert compile_bench.small_pairs(kind, args, calls=1)["pairs"] == 1
    assert counters["stats"]["unique_graphs"] - graphs == 6  # both variants of each model, compiled

    model = compile_bench._small_model("bert", "flagos", True)
    entries = [compile_bench._entry_of_its_own(model, variant) for variant in ("native", "flagos")]
    ids = torch.randint(0, 1024, (1, 8), device="flagos")
    for entry in entries:
        with torch.no_grad():
            torch.compile(entry, fullgraph=True)(input_ids=ids)
    assert entries[0].__code__ is not entries[1].__code__
    assert [len(_debug_get_cache_entry_list(entry.__code__)) for entry in entries] == [1, 1]
