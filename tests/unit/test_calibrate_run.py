"""python -m torch_fl calibrate and torch_fl.calibrate end to end on host memory, with a fake per-call timer:
the file written and what it routes, a wrong or missing candidate, the command line (scripts, models,
tasks, bad arguments), and one run with the real timer.

The candidates are cpu_fallback (always available) and a stand-in FlagGems whose functions use ATen
(tests/unit/routing_fixtures.py); the workload timer that confirms the routed classes is faked to find
the workload faster with every call routed off native (calibrate_fixtures.routed_is_faster).
"""

from __future__ import annotations

import pytest
import torch

import torch_fl
from tests.unit.calibrate_fixtures import calls_of, fake_timer, gems, routed_is_faster, workload  # noqa: F401
from tests.unit.routing_fixtures import no_flag_gems, routing_state  # noqa: F401  (fixtures)
from torch_fl import backends, calibration, routing
from torch_fl.__main__ import main
from torch_fl.cli import calibrate as calibrate_cli
from torch_fl.routing import config
from torch_fl.vocab.errors import RoutingError

pytestmark = pytest.mark.anyplatform


def test_calibrate_writes_a_file_that_routes_the_large_calls(routing_state, tmp_path):  # noqa: F811
    out = tmp_path / "cal.conf"
    result = torch_fl.calibrate(
        workload, str(out), candidate="cpu_fallback", timer=fake_timer(256), rounds=2, progress=False
    )
    assert result.unavailable is None
    mm_rules = [c.rule for c in result.classes if c.op == "mm"]
    assert mm_rules == ["mm[float32] = native", "mm[float32, numel>=256] = cpu_fallback"]
    assert result.saved_s > 0
    rs, problems = config.check_file(str(out))
    assert problems == []
    assert f"include {calibration.default_include()}" in out.read_text()
    routing.load_config(str(out))
    routing.reset_stats()
    workload()
    assert calls_of("mm").get("cpu_fallback") == 4  # the 16x16 and 32x32 calls
    text = str(routing.explain("mm", "float32"))
    assert "numel>=256" in text and "measured: native 10.0 us, cpu_fallback 1.0 us (10.00x), 4 calls" in text
    assert routing.explain("mm", "float32").as_dict()["sizes"][0]["measured"].startswith("native 10.0 us")


def test_calibrate_routes_the_argument_values_the_candidate_wins_for(routing_state, tmp_path):  # noqa: F811
    x = torch.rand(64, device="flagos")

    def work():
        for _ in range(2):
            x**2, x**3

    def timer(run, call, backend):  # the candidate wins for exponent 3 only (x*x is cheap natively)
        run()
        return 10e-6 if backend == "native" else (1e-6 if call.value == 3 else 20e-6)

    out = tmp_path / "cal.conf"
    result = torch_fl.calibrate(work, str(out), candidate="cpu_fallback", timer=timer, rounds=1, progress=False)
    assert [c.rule for c in result.classes if c.op == "pow.Tensor_Scalar"] == [
        "pow.Tensor_Scalar[float32] = native",
        "pow.Tensor_Scalar[float32, exponent=3] = cpu_fallback",
    ]
    routing.load_config(str(out))
    routing.reset_stats()
    work()
    assert calls_of("pow.Tensor_Scalar") == {"native": 2, "cpu_fallback": 2}


def test_calibrate_rejects_a_wrong_or_failing_candidate(gems, tmp_path):  # noqa: F811
    gems(**{"mm": lambda a, b: torch.mm(a, b) + 1, "abs": lambda a: (_ for _ in ()).throw(RuntimeError("boom"))})

    def work():
        x = torch.ones(8, 8, device="flagos")
        x @ x
        torch.abs(x)

    result = torch_fl.calibrate(work, str(tmp_path / "c.conf"), timer=fake_timer(1), rounds=1, progress=False)
    reasons = {ms.call.key.op: ms.reason for ms in result.measurements}
    assert "results differ from native" in reasons["mm"]
    assert "fell back to native" in reasons["abs"]
    assert {c.rule for c in result.classes} == {"mm[float32] = native", "abs[float32] = native"}
    assert result.routed == []
    assert "no class is faster on flaggems" in result.summary()


def test_calibrate_without_the_candidate_says_so_and_writes_no_rules(no_flag_gems, tmp_path):  # noqa: F811
    assert not backends.get("flaggems").available()
    out = tmp_path / "c.conf"
    result = torch_fl.calibrate(workload, str(out), progress=False)
    assert result.unavailable and result.classes == []
    assert "NO RULES: flaggems is unavailable here" in out.read_text()
    assert [r for r in config.load_file(str(out)) if r.file == str(out)] == []


def test_cli_calibrates_a_script_and_reports(routing_state, tmp_path, monkeypatch, capsys):  # noqa: F811
    script = tmp_path / "w.py"
    script.write_text(
        "import sys, torch, torch_fl\n"
        "n = int(sys.argv[1])\n"
        "x = torch.ones(n, n, device='flagos')\n"
        "for _ in range(3):\n    x @ x\n"
    )
    out = tmp_path / "cal.conf"
    monkeypatch.setattr(calibrate_cli, "TIMER", fake_timer(1))
    # in this process (--isolate off): a worker process would not see the fake timer
    argv = ["calibrate", "--script", str(script), "-o", str(out), "--candidate", "cpu_fallback", "--rounds", "1"]
    argv.extend(["--isolate", "off"])
    assert main([*argv, "--", "16"]) == 0
    captured = capsys.readouterr()
    assert "mm[float32] = cpu_fallback" in out.read_text()
    assert f"FLAGOS_BACKEND_CONFIG={out}" in captured.out
    assert "[calibrate]" in captured.err  # progress, on stderr
    assert main(["validate", str(out)]) == 0


def test_cli_without_flaggems_exits_1_and_says_why(no_flag_gems, tmp_path, capsys):  # noqa: F811
    script = tmp_path / "w.py"
    script.write_text("import torch, torch_fl\ntorch.ones(2, device='flagos') + 1\n")
    out = tmp_path / "cal.conf"
    assert main(["calibrate", "--script", str(script), "-o", str(out), "--quiet", "--isolate", "off"]) == 1
    assert "WITHOUT RULES: flaggems is unavailable here" in capsys.readouterr().err


def test_bad_arguments_are_errors(routing_state, tmp_path, capsys):  # noqa: F811
    # found before any work, in a worker process (--isolate on) or not
    for isolate in ("on", "off"):
        assert main(["calibrate", "--script", str(tmp_path / "missing.py"), "--isolate", isolate]) == 2
        assert "no such file" in capsys.readouterr().err
        assert main(["calibrate", "--tasks", "decode,sample", "--isolate", isolate]) == 2
        assert "expected a comma list of decode, prefill, train" in capsys.readouterr().err
        assert main(["calibrate", "--candidate", "flagem", "--isolate", isolate]) == 2
        assert "unknown backend 'flagem'" in capsys.readouterr().err
        assert main(["calibrate", "--candidate", "native", "--isolate", isolate]) == 2
        assert "is the native route" in capsys.readouterr().err
        assert main(["calibrate", "--isolate", isolate, "--", "x"]) == 2
        assert "only --script takes arguments" in capsys.readouterr().err
    with pytest.raises(RoutingError, match="is the native route"):
        torch_fl.calibrate(workload, candidate="native")
    with pytest.raises(RoutingError, match="unknown backend 'flagem'"):
        torch_fl.calibrate(workload, candidate="flagem")


def test_the_real_timer_runs_end_to_end_on_host(routing_state, tmp_path):  # noqa: F811
    out = tmp_path / "cal.conf"
    result = torch_fl.calibrate(workload, str(out), candidate="cpu_fallback", rounds=1, reps=1, progress=False)
    assert {m.call.key.op for m in result.measurements} == {"mm"}
    assert all(m.native_s > 0 and m.candidate_s > 0 for m in result.measurements)
    assert config.check_file(str(out))[1] == []


def test_cli_calibrates_the_demo_model(routing_state, tmp_path, monkeypatch):  # noqa: F811
    pytest.importorskip("transformers")
    out = tmp_path / "cal.conf"
    monkeypatch.setattr(calibrate_cli, "TIMER", fake_timer(4096))
    argv = ["calibrate", "--model", "demo", "--tokens", "1", "--prompt-len", "4", "--rounds", "1", "--quiet"]
    argv.extend(["--tasks", "decode", "--isolate", "off"])  # on a GPU the demo's model is Qwen3-0.6B's size
    assert main([*argv, "--candidate", "cpu_fallback", "-o", str(out)]) == 0
    rs = [r for r in config.load_file(str(out)) if r.file == str(out)]
    assert any(r.pattern == "mm" for r in rs)
    assert any(r.backend == "cpu_fallback" for r in rs)
    # the fake timer makes calls from 4096 elements up faster on the candidate, and only those
    assert all((r.backend == "cpu_fallback") == (r.min_numel >= 4096) for r in rs if r.min_numel is not None)


def test_cli_model_tasks_cover_prefill_and_training(routing_state, tmp_path, monkeypatch, capsys):  # noqa: F811
    """--tasks: the model workload records what e2e.py measures; a training step brings backward operators."""
    pytest.importorskip("transformers")
    monkeypatch.setattr(calibrate_cli, "TIMER", fake_timer(4096))
    ops_of = {}
    for tasks in ("prefill", "train"):
        out = tmp_path / f"{tasks}.conf"
        argv = ["calibrate", "--model", "tiny", "--tasks", tasks, "--seq", "8", "--rounds", "1", "--quiet"]
        argv.extend(["--isolate", "off"])
        assert main([*argv, "--candidate", "cpu_fallback", "-o", str(out)]) == 0
        ops_of[tasks] = {r.pattern for r in config.load_file(str(out)) if r.file == str(out)}
    assert not any("backward" in op for op in ops_of["prefill"])
    assert any("backward" in op for op in ops_of["train"])
    assert main(["calibrate", "--model", "tiny", "--tasks", "decode,sample", "-o", str(tmp_path / "x.conf")]) == 2
    assert "expected a comma list of decode, prefill, train" in capsys.readouterr().err


@pytest.mark.parametrize("model", ["gpt2-tiny", "bert-tiny", "vit-tiny"])
def test_cli_calibrates_the_standard_models(routing_state, tmp_path, monkeypatch, capsys, model):  # noqa: F811
    """GPT-2, BERT and ViT built from their configurations: a forward pass and a training step of each."""
    pytest.importorskip("transformers")
    monkeypatch.setattr(calibrate_cli, "TIMER", fake_timer(4096))
    out = tmp_path / "cal.conf"
    argv = ["calibrate", "--model", model, "--rounds", "1", "--confirm", "0", "--quiet", "--isolate", "off"]
    assert main([*argv, "--candidate", "cpu_fallback", "-o", str(out)]) == 0
    ops = {r.pattern for r in config.load_file(str(out)) if r.file == str(out)}
    assert ops & {"addmm", "mm", "bmm"}, ops  # the linear layers
    assert any("backward" in op for op in ops), ops  # the training step
    capsys.readouterr()
    if model != "gpt2-tiny":  # an encoder generates nothing
        assert main(["calibrate", "--model", model, "--tasks", "decode", "-o", str(tmp_path / "x.conf")]) == 2
        assert f"{model} generates no text; its tasks are prefill, train" in capsys.readouterr().err
