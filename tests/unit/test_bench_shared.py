"""benchmarks/common.py: ABBA timing and its statistics (torch_fl/calibration/stats.py), deadlines, canonical
files and their meta block."""

from __future__ import annotations

import json

import pytest

from benchmarks import common
from benchmarks import targets as targets_page
from tests.helpers import run_python


@pytest.mark.anyplatform
def test_paired_seconds_alternate_abba_and_time_each_call_to_its_sync():
    now = [0.0]
    order = []

    def make(key, seconds):
        def call():
            order.append(key)
            now[0] += seconds

        return call

    synced = []
    secs = common.paired_seconds(
        {"native": make("n", 1.0), "flagos": make("f", 3.0)}, 4, synced.append, clock=lambda: now[0]
    )
    assert order == ["n", "f", "f", "n", "n", "f", "f", "n"]
    assert synced == ["native", "flagos", "flagos", "native", "native", "flagos", "flagos", "native"]
    assert secs == {"native": [1.0] * 4, "flagos": [3.0] * 4}
    assert common.alternating(3, {"a": lambda: 1, "b": lambda: 2}) == {"a": [1, 1, 1], "b": [2, 2, 2]}


@pytest.mark.anyplatform
def test_ratio_stats_median_quartiles_and_noise():
    got = common.ratio_stats([0.9, 1.0, 1.1, 1.2, 0.8])
    assert got["pairs"] == 5 and got["ratio_median"] == 1.0
    q1, q3 = got["ratio_quartiles"]
    assert q1 < 1.0 < q3 and got["noise"] == pytest.approx((q3 - q1) / 2, abs=1e-4)
    assert common.ratio_stats([0.97]) == {
        "pairs": 1,
        "ratio_median": 0.97,
        "ratio_quartiles": [0.97, 0.97],
        "noise": None,
        "median_ci95": None,
    }


@pytest.mark.anyplatform
def test_median_interval_order_statistics():
    """The r-th smallest and largest of n values, r the largest with P(Binomial(n, 1/2) < r) <= 2.5%."""
    assert common.median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None  # even (min, max) covers only 93.8%
    assert common.median_interval([6.0, 1.0, 5.0, 2.0, 4.0, 3.0]) == [1.0, 6.0]  # covers 96.9%
    assert common.median_interval([float(v) for v in range(16)]) == [3.0, 12.0]  # 97.9%; r = 5 gives 92.3%
    assert common.median_interval([float(v) for v in range(60)]) == [21.0, 38.0]
    assert common.ratio_stats([float(v) for v in range(16)])["median_ci95"] == [3.0, 12.0]


@pytest.mark.anyplatform
def test_machine_names_and_canonical_paths(tmp_path):
    assert common.machine("NVIDIA H200") == "h200"
    assert common.machine("") == "host"
    assert common.machine("NVIDIA A100-SXM4-80GB") == "a100-sxm4-80gb"
    assert common.canonical_path("e2e", "NVIDIA H200") == common.RESULTS / "e2e-h200.json"
    # --out: a file as given, a folder gets the canonical name inside it
    assert common.out_path("e2e", tmp_path / "x.json") == tmp_path / "x.json"
    assert common.out_path("e2e", tmp_path) == tmp_path / common.canonical_path("e2e").name
    assert common.out_path("e2e", None) == common.canonical_path("e2e")
    # a smoke run never overwrites the canonical file
    smoke = common.out_path("e2e", None, smoke=True)
    assert smoke.name == common.canonical_path("e2e").name and smoke.parent != common.RESULTS
    assert common.out_path("e2e", tmp_path / "x.json", smoke=True) == tmp_path / "x.json"


@pytest.mark.anyplatform
def test_write_puts_the_meta_block_first(tmp_path):
    path = common.write("alias-pool", {"rows": {}}, tmp_path / "a.json", argv=["benchmarks/alias_pool.py", "--x"])
    data = json.loads(path.read_text())
    assert list(data) == ["meta", "rows"]
    meta = data["meta"]
    assert meta["benchmark"] == "alias-pool" and meta["command"] == "python -m benchmarks.alias_pool --x"
    assert meta["machine"] == common.machine()
    assert meta["date"].endswith("Z") and len(meta["date"]) == 20
    assert set(meta["versions"]) == {"python", "torch", "cuda", "triton", "flag_gems", "transformers", "gpu"}
    assert meta["commit"]  # this checkout is a git repository


@pytest.mark.anyplatform
def test_commit_outside_git_comes_from_the_sender(monkeypatch, tmp_path):
    monkeypatch.setattr(common, "REPO", tmp_path)  # no .git here
    monkeypatch.setenv("TORCH_FL_COMMIT", "abc1234")
    monkeypatch.delenv("TORCH_FL_DIRTY", raising=False)  # the GPU scripts export it
    assert common.git_commit() == ("abc1234", None)
    monkeypatch.delenv("TORCH_FL_COMMIT")
    assert common.git_commit() == (None, None)


@pytest.mark.anyplatform
def test_the_senders_commit_wins_over_a_stale_checkout(monkeypatch):
    monkeypatch.setenv("TORCH_FL_COMMIT", "abc1234")
    monkeypatch.setenv("TORCH_FL_DIRTY", "0")
    assert common.git_commit() == ("abc1234", False)
    monkeypatch.setenv("TORCH_FL_DIRTY", "1")
    assert common.git_commit() == ("abc1234", True)


@pytest.mark.anyplatform
def test_a_deadline_stops_a_step_that_would_end_late_judged_by_the_last_of_its_kind():
    import time

    now = time.perf_counter()
    assert common.Deadline(None, now - 1e6).allows("child")
    d = common.Deadline(60.0, now)
    assert d.allows("child") and d.allows("pairs")  # not yet timed: may start while time is left
    d.took("child", now - 65.0)  # a child took 65 s: another would end past 60 s
    assert not d.allows("child") and d.allows("pairs")
    d.took("pairs", now - 1.0)
    assert d.allows("pairs")
    assert not common.Deadline(0.0, now - 1.0).allows("pairs")  # past the deadline: nothing starts


@pytest.mark.anyplatform
def test_overhead_targets_judge_throughput_by_its_floor_and_host_time_by_its_ceiling():

    def row(name, unit, ratio, added=None):
        return {"name": name, "unit": unit, "ratio": ratio, "added_us": added}

    def judged(results):
        over = {"meta": {"benchmark": "overhead"}, "results": results}
        return {t: met for t, _, met, _ in targets_page.targets({"overhead-h200": over})}

    faster = judged([row("mm 8192^3 bf16", "TFLOP/s", 1.021), row("add 4x4", "us/call", 0.97, -0.2)])
    assert faster == {
        "large operators at most 2 % below native": True,  # faster than native is not a miss
        "small operators <= native + 1.0 us per call": True,
    }
    slower = judged([row("mm 8192^3 bf16", "TFLOP/s", 0.979), row("mm 64x64", "us/call", 1.18, 2.46)])
    assert not any(slower.values())


@pytest.mark.anyplatform
def test_an_error_row_names_the_exception_that_ended_the_child():
    stderr = (
        "UserWarning: Logical operators 'and' and 'or' are deprecated\n  mask = a and b\nTraceback (most recent "
        'call last):\n  File "e2e.py", line 1, in <module>\ntorch.AcceleratorError: CUDA error: an illegal memory '
        "access was encountered\nSearch for `cudaErrorIllegalAddress' in the CUDA docs\n"
    )
    expected = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    assert common.exception_line(stderr) == expected
    assert common.exception_line("killed\n") == "killed" and common.exception_line("") == "no output"


@pytest.mark.anyplatform
def test_abba_blocks_group_the_abba_order_into_runs_of_one_side():
    """calibrate's confirmation switches routing once per run of one side: native, routed, routed, native, ..."""
    assert common.stats.abba_blocks(4, "n", "r") == [("n", 1), ("r", 2), ("n", 2), ("r", 2), ("n", 1)]
    assert common.stats.abba_blocks(1, "n", "r") == [("n", 1), ("r", 1)]


@pytest.mark.anyplatform
def test_the_benchmarks_shared_modules_do_not_import_torch_fl():
    """A native child imports them, and native CUDA backward fails once torch_fl is imported."""
    code = "import sys, benchmarks.common, benchmarks.e2e, benchmarks.report; assert 'torch_fl' not in sys.modules"
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.anyplatform
def test_the_readme_table_reads_the_newest_gpu_machines_set():
    def result(benchmark, date):
        return {"meta": {"benchmark": benchmark, "date": date}, "results": [row]}

    row = {"name": "add 4x4", "unit": "us/call", "ratio": 1.0, "added_us": 0.1}
    results = {
        "overhead-h200": result("overhead", "2026-12-04T00:00:00Z"),
        "overhead-h100-80gb-hbm3": result("overhead", "2026-12-06T00:00:00Z"),
        "route-breakdown-host": result("route-breakdown", "2026-12-07T00:00:00Z"),  # host results never count
        "trainer-h200": {"peak_memory": {"ratio": 1.0}},
        "trainer-h100-80gb-hbm3": {"peak_memory": {"ratio": 1.01}},
    }
    assert targets_page.gpu_machine(results) == "h100-80gb-hbm3"
    rows = targets_page.targets(results)
    assert {src for *_, src in rows} == {"overhead-h100-80gb-hbm3", "trainer-h100-80gb-hbm3"}
    assert ("Trainer fine-tune of Qwen3-0.6B peak memory <= 1.02x native", "1.010x") in [(t, m) for t, m, *_ in rows]
    assert targets_page.gpu_machine({"e2e-h200": {}}) == "h200"
    # one benchmark of another machine, newer, does not move the table from the machine with the set
    results["trainer-h200"] = {"meta": {"date": "2026-12-08T00:00:00Z"}}
    results["e2e-h100-80gb-hbm3"] = result("e2e", "2026-12-06T00:00:00Z")
    assert targets_page.gpu_machine(results) == "h100-80gb-hbm3"


@pytest.mark.anyplatform
def test_speed_ups_over_eager_come_from_the_pairs_where_no_child_round_ran():
    eager = {"ratio_median": 0.97, "pairs": 3, "native_tokens_per_s": 30.0, "flagos_tokens_per_s": 29.0}
    graphs = {"ratio_median": 0.99, "pairs": 3, "native_tokens_per_s": 230.0, "flagos_tokens_per_s": 228.0}
    generate = {"ratio_median": 0.98, "pairs": 3, "native_tokens_per_s": 210.0, "flagos_tokens_per_s": 58.0}
    rows = {t: (m, ok) for t, m, ok, _ in targets_page.graph_targets({}, graphs, eager)}
    assert rows["Qwen3-0.6B graph decode >= 2x native eager decode"] == ("7.60x", True)  # flagos graphs / native eager
    rows = {t: (m, ok) for t, m, ok, _ in targets_page.generate_targets({}, generate, eager)}
    assert rows["Qwen3-0.6B compiled static-cache generate() >= 3x flagos eager decode"] == ("2.00x", False)
    assert len(targets_page.graph_targets({}, graphs)) == 1  # without eager pairs: no speed-up row
