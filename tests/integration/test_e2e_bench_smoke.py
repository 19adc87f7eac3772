"""benchmarks/e2e.py runs end to end (one quick round, tiny model) and writes a complete report, canonically named."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import common, e2e_worker
from benchmarks import e2e as e2e_bench
from benchmarks import report as report_page
from benchmarks import targets as targets_page

pytest.importorskip("transformers")
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.anyplatform
def test_e2e_benchmark_quick(tmp_path):
    cmd = [sys.executable, "-m", "benchmarks.e2e", "--model", "tiny", "--quick", "--rounds", "1"]
    cmd += ["--variants", "native,flagos", "--out", str(tmp_path), "--paired", "2", "--train-pairs", "2"]
    cmd += ["--train-steps", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # --out a folder: the canonical name inside it, e2e-<machine>.json
    json_path = tmp_path / common.canonical_path("e2e").name
    assert [p.name for p in tmp_path.glob("*.json")] == [json_path.name]
    report = json.loads(json_path.read_text())
    meta = report["meta"]
    assert meta["benchmark"] == "e2e" and meta["command"].startswith("python -m benchmarks.e2e ")
    assert "--quick" in meta["command"].split() and meta["date"].endswith("Z")
    assert meta["versions"]["torch"] and meta["versions"]["python"]
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
    # the decode prompt's logits, compared with native's in the parent (the files are gone)
    assert flagos["decode"]["logits_within_tolerance"] is True and flagos["decode"]["logits_max_diff"] >= 0
    assert report["summary"]["native"]["decode"]["logits_max_diff"] == 0  # native's round against itself
    assert all("logits_file" not in r["tasks"].get("decode", {}) for r in report["raw"])
    assert sum(flagos["decode"]["backends"].values()) > 0  # routing stats were collected in the child
    native_raw = [r for r in report["raw"] if r["variant"] == "native"]
    assert native_raw and all(r["torch_fl_imported"] is False for r in native_raw)
    # --paired: native and flagos alternating in one child, per-pair ratios
    paired = report["paired"]
    assert paired["variant"] == "paired" and "error" not in paired, paired
    for task in ("decode", "prefill"):
        entry = paired["tasks"][task]
        assert entry["pairs"] == 2 and len(entry["ratios"]) == 2 and entry["ratio_median"] > 0
        q1, q3 = entry["ratio_quartiles"]
        assert q1 <= q3 and entry["noise"] == pytest.approx((q3 - q1) / 2, abs=1e-4)
        assert entry["native_tokens_per_s"] > 0 and entry["flagos_tokens_per_s"] > 0
    assert paired["tasks"]["decode"]["tokens_match_native"] is True
    assert "train" not in paired["tasks"]  # native CUDA backward cannot share a process with torch_fl
    # --train-pairs: native's and flagos's training steps in worker processes of their own, taking turns
    train = report["train_workers"]
    assert "error" not in train, train
    assert train["pairs"] == 2 and train["steps_per_sample"] == 2 and len(train["flagos_ms"]) == 2
    assert train["ratio_median"] > 0 and train["native_tokens_per_s"] > 0 and train["flagos_tokens_per_s"] > 0
    label, entry = report_page.e2e_pairs(report)[-1]
    assert (label, entry) == ("train, worker processes taking turns", train)
    rows = {t: m for t, m, _, _ in targets_page.e2e_targets(report)}
    assert "(train, worker processes taking turns, 2 pairs), " in rows["Qwen3-0.6B training >= 0.98x native"]


@pytest.mark.anyplatform
def test_pairs_only_report_has_no_empty_rounds():
    """--rounds 0 (in-process pairs alone): the tables say so instead of listing errors."""
    e2e = e2e_bench
    summary = e2e.summarise([], ["native", "flagos"], ["prefill"])
    assert summary["flagos"]["prefill"]["rounds"] == 0
    assert report_page.e2e_tables({"summary": summary, "rounds": 0}) == []  # no table of child rounds
    # a round that ran still shows, errors included
    raw = [
        {"variant": "native", "tasks": {"prefill": {"tokens_per_s": 10.0}}},
        {"variant": "flagos", "tasks": {}, "error": "child timed out"},
    ]
    summary = e2e.summarise(raw, ["native", "flagos"], ["prefill"])
    table = "\n".join(report_page.e2e_tables({"summary": summary, "rounds": 1}))
    assert (
        "| native | prefill | 1/1 | 10.0 |" in table and "| flagos | prefill | 0/1 | error: child timed out |" in table
    )


@pytest.mark.anyplatform
def test_a_deadline_stops_before_the_next_child_and_keeps_what_ran(tmp_path):
    """The deadline is judged before each child process (its pairs, each variant's round): past it, nothing
    more starts and the report has what ran."""
    cmd = [sys.executable, "-m", "benchmarks.e2e", "--model", "tiny", "--quick", "--rounds", "3"]
    cmd += ["--variants", "native,flagos", "--out", str(tmp_path / "e2e.json"), "--paired", "1", "--deadline", "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "deadline (0 s): not starting the pairs of flagos or anything after them" in proc.stdout
    report = json.loads((tmp_path / "e2e.json").read_text())
    assert report["paired"] is None and report["raw"] == [] and report["rounds"] == 0


@pytest.mark.anyplatform
def test_graphs_task_summary_compares_with_native_graphs_and_native_eager_decode():
    e2e = e2e_bench

    def child(variant, decode, graphs, tokens):
        return {
            "variant": variant,
            "round": 0,
            "tasks": {
                "decode": {"tokens_per_s": decode, "tokens": [[1, 2]]},
                "graphs": {"tokens_per_s": graphs, "tokens": tokens, "tokens_match_eager": True},
            },
        }

    raw = [child("native", 40.0, 200.0, [[1, 2]]), child("flagos", 38.0, 199.0, [[1, 3]])]
    summary = e2e.summarise(raw, ["native", "flagos"], ["decode", "graphs"])
    graphs = summary["flagos"]["graphs"]
    assert graphs["ratio_to_native"] == pytest.approx(0.995)
    assert graphs["ratio_to_native_eager_decode"] == pytest.approx(199.0 / 40.0)
    assert graphs["tokens_match_native"] is False and graphs["tokens_match_eager"] is True
    assert summary["flagos"]["decode"]["tokens_match_native"] is True  # decode compares with native's decode


@pytest.mark.cuda
def test_e2e_graphs_task_quick(tmp_path):
    cmd = [sys.executable, "-m", "benchmarks.e2e", "--model", "tiny", "--quick", "--rounds", "1"]
    cmd += ["--variants", "native,flagos", "--tasks", "decode,graphs", "--out", str(tmp_path / "g.json")]
    cmd += ["--paired", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "g.json").read_text())
    # --paired alternates native cuda graphs and flagos graphs in one process
    pair = report["paired"]["tasks"]["graphs"]
    assert "error" not in pair and pair["pairs"] == 2 and pair["tokens_match_native"] is True, pair
    for variant in ("native", "flagos"):
        entry = report["summary"][variant]["graphs"]
        assert "errors" not in entry and entry["tokens_match_eager"] is True, entry
    flagos = report["summary"]["flagos"]["graphs"]
    assert flagos["tokens_match_native"] is True and flagos["ratio_to_native_eager_decode"] > 0
    raw = next(r for r in report["raw"] if r["variant"] == "flagos")["tasks"]["graphs"]
    assert raw["captures"] == 1 and raw["captured_calls"] == {"native": raw["captured_calls"]["native"]}


@pytest.mark.anyplatform
def test_graph_decode_targets_in_the_readme_table():
    summary = {
        "flagos": {"graphs": {"ratio_to_native": 0.995, "ratio_to_native_eager_decode": 4.8, "rounds_ok": 2}},
        "flagos_flaggems": {"graphs": {"ratio_to_native": 0.97}},
    }
    rows = {t: (m, ok) for t, m, ok, _ in targets_page.graph_targets(summary)}
    assert rows == {
        "Qwen3-0.6B graph decode >= 0.99x native graph decode": ("0.995x (2 child rounds)", True),
        "Qwen3-0.6B graph decode >= 2x native eager decode": ("4.80x", True),
        "FlagGems profile graph decode >= 1.0x native graph decode": ("0.970x", False),
    }
    # In-process pairs, where they ran, come first and decide the target.
    pair = {"ratio_median": 0.985, "noise": 0.004, "pairs": 4}
    text, met = {t: (m, ok) for t, m, ok, _ in targets_page.graph_targets(summary, pair)}[
        "Qwen3-0.6B graph decode >= 0.99x native graph decode"
    ]
    assert (text, met) == ("0.985x ± 0.004 (4 pairs), 0.995x (2 child rounds)", False)
    assert targets_page.graph_targets({"flagos": {"decode": {}}}) == []


@pytest.mark.anyplatform
def test_static_generate_task_runs_hugging_faces_generate_and_has_its_targets(tmp_path):
    # On host memory transformers compiles nothing (as on the CPU): the task's code path, tokens and figures.
    cmd = [sys.executable, "-m", "benchmarks.e2e", "--model", "tiny", "--quick", "--rounds", "1"]
    cmd += ["--variants", "native,flagos", "--tasks", "decode,static_generate", "--out", str(tmp_path / "s.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    flagos = json.loads((tmp_path / "s.json").read_text())["summary"]["flagos"]
    gen = flagos["static_generate"]
    assert gen["tokens_match_native"] is True and gen["ratio_to_native"] > 0 and gen["ratio_to_native_eager_decode"] > 0
    rows = {t: ok for t, _, ok, _ in targets_page.generate_targets({"static_generate": gen, "decode": {}}, None)}
    assert list(rows) == ["Qwen3-0.6B compiled static-cache generate() >= 0.97x native's"]
    summary = {"static_generate": {"tokens_per_s": 700.0, "ratio_to_native": 0.98, "rounds_ok": 1}}
    summary["decode"] = {"tokens_per_s": 200.0}
    pair = {"ratio_median": 0.96, "noise": 0.01, "pairs": 4}
    rows = {t: (m, ok) for t, m, ok, _ in targets_page.generate_targets(summary, pair)}
    assert rows == {
        "Qwen3-0.6B compiled static-cache generate() >= 0.97x native's": (
            "0.960x ± 0.010 (4 pairs), 0.980x (1 round)",
            False,
        ),
        "Qwen3-0.6B compiled static-cache generate() >= 3x flagos eager decode": ("3.50x", True),
    }


@pytest.mark.anyplatform
def test_a_paired_task_that_failed_is_reported_and_left_out_of_the_targets():
    report = report_page
    e2e = e2e_bench
    paired = {
        "tasks": {
            "prefill": {"ratio_median": 0.99, "noise": 0.01, "pairs": 4, "ratios": [0.99]},
            "graphs": {"error": "RuntimeError: capture failed"},
        }
    }
    assert [label for label, _ in report.e2e_pairs({"paired": paired})] == ["prefill pairs"]
    assert "graphs: RuntimeError: capture failed; [1 s]" in e2e._brief({**paired, "wall_s": 1})


@pytest.mark.anyplatform
def test_calibrated_variant_routes_by_its_file_and_only_when_given(tmp_path):
    routes = tmp_path / "calibrated.conf"
    routes.write_text("include builtin:backends_cpu.conf\nadd.Tensor = cpu_fallback\n")
    cmd = [sys.executable, "-m", "benchmarks.e2e", "--model", "tiny", "--quick", "--rounds", "1"]
    cmd += [
        "--tasks",
        "decode,train",
        "--variants",
        "native,flagos,flagos_calibrated",
        "--out",
        str(tmp_path / "c.json"),
    ]
    # The calibrated file reaches flagos_calibrated alone: a routing file set in the shell reaches no child.
    env = dict(os.environ, FLAGOS_BACKEND_CONFIG=str(tmp_path / "missing.conf"))
    pairs = ["--paired", "1", "--paired-variants", "flagos,flagos_calibrated"]
    proc = subprocess.run(
        [*cmd, "--calibrated", str(routes), *pairs], capture_output=True, text=True, timeout=240, cwd=REPO, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "c.json").read_text())
    assert report["variants"] == ["native", "flagos", "flagos_calibrated"]
    assert report["calibrated_sha256"] == hashlib.sha256(routes.read_bytes()).hexdigest()
    files = {r["variant"]: r.get("routing_file") for r in report["raw"]}
    assert files["flagos_calibrated"] == str(routes) and files["flagos"] != str(routes)  # flagos: the shipped file
    cal = report["summary"]["flagos_calibrated"]["decode"]
    assert cal["rounds_ok"] == 1 and cal["backends"].get("cpu_fallback", 0) > 0, cal
    assert cal["tokens_match_native"] is True
    assert "cpu_fallback" not in report["summary"]["flagos"]["decode"]["backends"]
    # --paired-variants: native against each routing in a process of its own, routed as in the rounds
    routed = report["paired_routed"]["flagos_calibrated"]
    assert routed["routing_file"] == str(routes) and routed["tasks"]["decode"]["backends"]["cpu_fallback"] > 0
    assert "cpu_fallback" not in report["paired"]["tasks"]["decode"]["backends"]
    assert report["paired"]["routing_file"] != str(routes)
    # training pairs with flagos's native routes (native CUDA backward cannot share the process)
    train = routed["tasks"]["train"]
    assert train["against"] == "flagos native routes" and train["pairs"] == 1 and train["ratio_median"] > 0, train
    assert train["backends"]["cpu_fallback"] > 0
    assert "train" not in report["paired"]["tasks"]  # flagos on its native routes: nothing to pair with
    bad = subprocess.run([*cmd, "--paired-variants", "flagos_calibrated"], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "needs --calibrated FILE" in bad.stderr
    bad = subprocess.run([*cmd, "--paired-variants", "native"], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "cannot pair ['native']" in bad.stderr
    # Without --calibrated the variant is skipped, saying why; a missing file is an error.
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    skipped = json.loads((tmp_path / "c.json").read_text())["skipped"]
    assert "--calibrated FILE" in skipped["flagos_calibrated"]
    proc = subprocess.run([*cmd, "--calibrated", str(tmp_path / "nope.conf")], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "no such file" in proc.stderr


@pytest.mark.anyplatform
def test_calibrated_figures_say_when_the_committed_file_is_not_the_one_measured(tmp_path):
    report = report_page
    conf = "benchmarks/results/calibrated-h200.conf"
    sha = hashlib.sha256((REPO / conf).read_bytes()).hexdigest()
    summary = {"flagos_calibrated": {"decode": {"ratio_to_native": 1.001, "rounds_ok": 2}}}
    e2e = {"meta": {"command": f"python -m benchmarks.e2e --calibrated {conf} --paired 3"}, "summary": summary}
    assert report.calibrated_file_changed({**e2e, "calibrated_sha256": sha}) is None
    for measured in ({**e2e, "calibrated_sha256": "0" * 64}, e2e):  # another file, or not recorded
        note = report.calibrated_file_changed(measured)
        assert note.startswith("measured with an earlier calibrated-h200.conf than the committed one")
        assert note in targets_page.calibrated_targets(measured)[0][1]
        assert f"rows were {note}" in "\n".join(report.e2e_tables(measured))
    assert report.calibrated_file_changed({"meta": {"command": "python -m benchmarks.e2e"}}) is None


@pytest.mark.anyplatform
def test_training_targets_judged_by_worker_pairs_and_a_routing_by_its_pairs():
    report = report_page
    e2e = {"meta": {"benchmark": "e2e"}, "summary": {"flagos": {"train": {"ratio_to_native": 0.99, "rounds_ok": 1}}}}
    target = "Qwen3-0.6B training >= 0.98x native"
    # a child round is shown, but only pairs judge (one round of each is no interval)
    assert {t: (x, ok) for t, x, ok, _ in targets_page.targets({"e2e-h200": e2e})}[target] == (
        "0.990x (1 child round)",
        False,
    )
    workers = {"pairs": 16, "ratio_median": 0.985, "ratio_quartiles": [0.975, 0.995], "median_ci95": [0.97, 0.99]}
    e2e["train_workers"] = {**workers, "native_tokens_per_s": 1.0, "flagos_tokens_per_s": 1.0}
    text, met = {t: (x, ok) for t, x, ok, _ in targets_page.targets({"e2e-h200": e2e})}[target]
    assert text.startswith("0.985x ± 0.010") and "(train, worker processes taking turns, 16 pairs)" in text and met
    # a routing variant's training: its pairs against flagos's native routes, where they ran
    pairs = {"pairs": 8, "ratio_median": 1.2, "noise": 0.01, "native_tokens_per_s": 1.0, "flagos_tokens_per_s": 1.0}
    e2e["paired_routed"] = {"flagos_flaggems": {"tasks": {"train": pairs}}}
    [(_, text, _, _)] = targets_page.flaggems_profile_targets(e2e)
    assert text == "train 1.200x ± 0.010 (8 pairs)"
    table = "\n".join(report.e2e_tables(e2e))
    assert "| flagos_flaggems | train pairs, against flagos's native routes | 8 | 1.200x ± 0.010 |" in table


@pytest.mark.anyplatform
def test_calibrated_targets_in_the_readme_table():
    report = report_page
    summary = {
        "flagos_calibrated": {
            "decode": {"ratio_to_native": 1.001, "rounds_ok": 2},
            "prefill": {"ratio_to_native": 1.05, "rounds_ok": 2},
            "train": {"ratio_to_native": 1.01, "rounds_ok": 2},
        }
    }
    [(target, text, met, src)] = targets_page.calibrated_targets({"summary": summary})
    assert target.startswith("calibrated routing") and src == "e2e"
    assert text == "decode 1.001x (2 rounds), prefill 1.050x (2 rounds), train 1.010x (2 rounds)"
    assert met is False  # training below 1.02x
    summary["flagos_calibrated"]["train"]["ratio_to_native"] = 1.02
    assert targets_page.calibrated_targets({"summary": summary})[0][2] is True
    assert targets_page.calibrated_targets({"summary": {"flagos": {}}}) == []
    # pairs in one process (e2e.py --paired-variants) judge decode and prefill where present: the steadier figure
    pair = {"pairs": 3, "ratio_quartiles": [0.97, 0.99], "native_tokens_per_s": 1.0, "flagos_tokens_per_s": 1.0}
    routed = {"tasks": {"prefill": {**pair, "ratio_median": 0.98, "backends": {"native": 9, "flaggems": 3}}}}
    e2e = {"summary": summary, "paired_routed": {"flagos_calibrated": routed}}
    [(_, text, met, _)] = targets_page.calibrated_targets(e2e)
    assert text == "decode 1.001x (2 rounds), prefill 0.980x ± 0.010 (3 pairs), train 1.020x (2 rounds)"
    assert met is False  # the pairs' prefill, not the rounds' 1.05x
    # decode: token-by-token pairs (many short calls) before generate() pairs
    routed["tasks"]["decode"] = {**pair, "ratio_median": 0.9, "noise": 0.1}
    routed["tasks"]["decode_tokens"] = {**pair, "pairs": 64, "ratio_median": 1.01, "noise": 0.01}
    [(_, text, _, _)] = targets_page.calibrated_targets(e2e)
    assert text.startswith("decode 1.010x ± 0.010 (64 pairs), prefill 0.980x")
    table = "\n".join(report.e2e_tables(e2e))
    assert "| flagos_calibrated | prefill pairs | 3 | 0.980x ± 0.010 |" in table and "native 9, flaggems 3 |" in table
    # replay's counts: which operators kept recording new signatures or stayed on Python, and why
    routed["tasks"]["prefill"]["replay"] = {
        "cat": {"hits": 10, "recorded": 56, "python": 0, "evicted": 0, "reasons": {}},
        "mul.Tensor": {"hits": 90, "recorded": 1, "python": 4, "evicted": 0, "reasons": {"it reads values": 4}},
    }
    line = "- flagos_calibrated, prefill pairs: 100 replayed, 57 recorded, 4 on Python; `cat` 56 recorded, 0 on Python"
    assert line + "; `mul.Tensor` 1 recorded, 4 on Python (it reads values)" in "\n".join(report.e2e_tables(e2e))


@pytest.mark.anyplatform
def test_replay_counts_between_two_snapshots():
    before = {"cat": {"hits": 4, "recorded": 5, "python": 1, "evicted": 0, "reasons": {"why": 1}}}
    now = {
        "cat": {"hits": 10, "recorded": 5, "python": 2, "evicted": 0, "reasons": {"why": 2}},
        "mul": {"hits": 3, "recorded": 1, "python": 0, "evicted": 0, "reasons": {}},
        "neg": {"hits": 0, "recorded": 0, "python": 0, "evicted": 0, "reasons": {}},
    }
    assert e2e_worker.replay_since(now, before) == {
        "cat": {"hits": 6, "recorded": 0, "python": 1, "evicted": 0, "reasons": {"why": 1}},
        "mul": {"hits": 3, "recorded": 1, "python": 0, "evicted": 0, "reasons": {}},
    }


@pytest.mark.anyplatform
def test_compare_logits_against_native_and_removes_the_files(tmp_path):
    import torch

    e2e = e2e_bench
    reference: dict = {}
    native = torch.linspace(-3, 3, 50).reshape(1, 50)
    results = {}
    for variant, logits in (("native", native), ("close", native + 1e-3), ("far", native + 1.0)):
        path = tmp_path / f"{variant}.pt"
        torch.save(logits, path)
        res = {"variant": "native" if variant == "native" else "flagos_flaggems"}
        res["tasks"] = {"decode": {"logits_file": str(path), "logits_dtype": "bfloat16"}}
        e2e.compare_logits(res, reference)
        assert not path.exists() and "logits_file" not in res["tasks"]["decode"]
        results[variant] = res["tasks"]["decode"]
    assert results["native"]["logits_max_diff"] == 0 and results["native"]["logits_within_tolerance"] is True
    assert results["close"]["logits_max_diff"] == pytest.approx(1e-3, rel=1e-2)
    assert results["close"]["logits_within_tolerance"] is True  # bf16: rtol 1.6e-2, atol 5e-2
    assert results["far"]["logits_within_tolerance"] is False


def _agreement_raw(tokens: list, backends: dict, within: bool) -> list[dict]:
    def child(variant, toks, extra):
        decode = {"tokens_per_s": 10.0, "tokens": toks, "peak_bytes": 1, **extra}
        return {"variant": variant, "round": 0, "tasks": {"decode": decode}}

    native = child("native", [[1, 2, 3, 4]], {"logits_max_diff": 0.0, "logits_within_tolerance": True})
    other = {"backends": backends, "logits_max_diff": 0.01 if within else 2.0, "logits_within_tolerance": within}
    return [native, child("flagos_flaggems", [tokens], other)]


@pytest.mark.anyplatform
def test_differing_tokens_are_explained_only_by_other_kernels_and_close_logits():
    e2e = e2e_bench
    target = "FlagGems profile greedy tokens native's or explained, logits within tolerance"

    def row(tokens, backends, within):
        summary = e2e.summarise(_agreement_raw(tokens, backends, within), ["native", "flagos_flaggems"], ["decode"])
        rows = [r for r in targets_page.flaggems_profile_targets({"summary": summary}) if r[0] == target]
        return summary["flagos_flaggems"]["decode"], rows[0]

    entry, (_, text, met, _) = row([1, 2, 9, 9], {"native": 5, "flaggems": 3}, True)
    assert entry["first_difference"] == 2 and entry["tokens_explained"] is True and met is True
    assert text.startswith("decode differ from token 3 (explained: flaggems ran)") and "within tolerance" in text
    # every operator on native's kernels: a difference is a defect, not explained
    entry, (_, text, met, _) = row([1, 2, 9, 9], {"native": 8}, True)
    assert entry["tokens_explained"] is False and met is False and "NOT explained" in text
    # logits beyond the tolerance fail the target whatever the tokens
    entry, (_, text, met, _) = row([1, 2, 3, 4], {"native": 5, "flaggems": 3}, False)
    assert entry["tokens_match_native"] is True and met is False and "BEYOND tolerance" in text
    entry, (_, text, met, _) = row([1, 2, 3, 4], {"native": 5, "flaggems": 3}, True)
    assert met is True and text.startswith("decode identical")
