"""Size rules (op[dtype, numel>=N]) and measured routing (python -m torch_fl calibrate) on host memory.

The candidate backends here are cpu_fallback (always available) and a stand-in
FlagGems whose functions use ATen (tests/unit/routing_fixtures.py); timings
come from a fake timer, so the tests assert what calibrate decides and writes
from given times, not how fast anything is. The workload timer that confirms
the routed classes (confirm.py) is a fake as well: by default it finds the
workload faster with every call routed off native.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import torch_fl
from tests.unit.routing_fixtures import flag_gems_with, no_flag_gems, routing_state  # noqa: F401  (fixtures)
from torch_fl import backends, calibration, routing
from torch_fl.__main__ import main
from torch_fl.backends import flaggems
from torch_fl.calibration import confirm, decide, measure, record
from torch_fl.calibration.record import CallKey, Recorded
from torch_fl.cli import calibrate as calibrate_cli
from torch_fl.routing import config, planner, rules
from torch_fl.routing.explain import measured
from torch_fl.routing.state import STATE
from torch_fl.vocab.errors import RoutingError

pytestmark = pytest.mark.anyplatform


def use_rules(text: str) -> list[config.Rule]:
    """Add `text`'s rules to the file layer, replacing those of an earlier call (the routing_state fixture
    restores the layer)."""
    parsed = config.parse_text(text, "test.conf")
    with planner.changing():
        STATE.file_rules = [*(r for r in STATE.file_rules if r.file != "test.conf"), *parsed]
        planner.apply()
    return parsed


def calls_of(op: str) -> dict[str, int]:
    return {s.backend: s.calls for s in routing.stats() if s.op == op}


@pytest.fixture
def gems(routing_state):  # noqa: F811
    yield lambda **fns: flaggems.LOADER.use_module(flag_gems_with(fns))
    flaggems.LOADER.reset()


# --- the routing file's size rules ---------------------------------------------------------------------------


def test_size_rules_parse_with_and_without_dtypes():
    rs = config.parse_text(
        "mm[bfloat16, numel>=1048576] = flaggems  # calibrated: x\nmm[numel >= 64] = cpu\nmm[float16,bfloat16] = cpu\n"
    )
    assert [(r.dtype, r.min_numel) for r in rs] == [
        (torch.bfloat16, 1048576),
        (None, 64),
        (torch.float16, None),
        (torch.bfloat16, None),
    ]
    assert rs[0].written == "mm[bfloat16, numel>=1048576] = flaggems"
    assert config.parse_text(rs[0].written)[0] == rs[0]  # written re-parses to the same rule


@pytest.mark.parametrize(
    "line, message",
    [
        ("mm[numel>=abc] = cpu", "bad number 'abc'"),
        ("mm[numel>=1.5] = cpu", "bad number '1.5'"),
        ("mm[numel<5] = cpu", "unknown condition 'numel<5'"),
        ("mm[size>=5] = cpu", "unknown condition 'size>=5'"),
        ("mm[numel>=0] = cpu", "holds for every call"),
        ("mm[numel>=4, numel>=8] = cpu", "two size conditions"),
        ("mm[float32, numel>=x] = cpu", "bad number 'x'"),
        ("zeros[numel>=4] = cpu", "has no tensor argument"),
        ("mm[numel>=4] == cpu", "malformed line"),
    ],
)
def test_bad_size_rules_are_problems_with_file_and_line(line, message):
    problems = []
    config.parse_text(f"# header\n{line}\n", "bad.conf", problems=problems)
    assert len(problems) == 1, problems
    assert problems[0].line == 2 and message in problems[0].message


def test_validate_lists_size_rule_problems(tmp_path, capsys):
    f = tmp_path / "r.conf"
    f.write_text("mm[float32, numel>=64] = cpu\nmm[numel<3] = cpu\n")
    assert main(["validate", str(f)]) == 1
    assert "r.conf:2: unknown condition 'numel<3'" in capsys.readouterr().err


def test_precedence_dtype_before_size_larger_threshold_first():
    rs = config.parse_text(
        "mm = cpu\nmm[numel>=100] = cpu_fallback\nmm[float32] = native\nmm[float32, numel>=1000] = cpu_fallback\n"
        "mm[numel>=500] = native\n"
    )
    route = rules.resolve(rs)[0]["mm"]
    sizes = dict(route.by_size)
    # dtype-less calls: 100.. cpu_fallback, 500.. native
    assert [(n, r.backend) for n, r in sizes[None]] == [(100, "cpu_fallback"), (500, "native")]
    # float32: its dtype rule beats the dtype-less size rules; its own size rule takes 1000 and up
    assert [(n, r.backend) for n, r in sizes[torch.float32]] == [(1000, "cpu_fallback")]


def test_a_higher_layer_replaces_size_rules(routing_state):  # noqa: F811
    use_rules("mm[float32, numel>=16] = cpu_fallback\n")
    routing.set_route("mm", "native")
    assert STATE.resolved["mm"].by_size == ()


# --- the C++ kernel picks the class by the first tensor's element count ---------------------------------------


def test_the_kernel_routes_calls_by_size(routing_state):  # noqa: F811
    use_rules("mm[float32, numel>=100] = cpu_fallback\nmm[numel>=1000] = cpu_fallback\nmm[float16] = native\n")
    routing.reset_stats()
    small, big = torch.randn(5, 5, device="flagos"), torch.randn(20, 20, device="flagos")
    torch.testing.assert_close((big @ big).cpu(), big.cpu() @ big.cpu())
    small @ small
    assert calls_of("mm").get("cpu_fallback") == 1
    # float64 takes the dtype-less classes: 400 elements is below 1000, 1600 above
    routing.reset_stats()
    mid = torch.randn(20, 20, device="flagos", dtype=torch.float64)
    large = torch.randn(40, 40, device="flagos", dtype=torch.float64)
    mid @ mid
    large @ large
    assert calls_of("mm").get("cpu_fallback") == 1
    # float16 has a rule of its own: no dtype-less class applies to it
    routing.reset_stats()
    h = torch.randn(40, 40, device="flagos", dtype=torch.float16)
    h @ h
    assert "cpu_fallback" not in calls_of("mm")


def test_the_boxed_kernel_and_list_arguments_route_by_size(routing_state):  # noqa: F811
    use_rules("log[float32, numel>=64] = cpu_fallback\ncat[float32, numel>=64] = cpu_fallback\n")
    routing.reset_stats()
    x, y = torch.rand(8, device="flagos"), torch.rand(8, 8, device="flagos")
    torch.log(x), torch.log(y)
    torch.cat([x, x]), torch.cat([y, y])
    assert calls_of("log").get("cpu_fallback") == 1
    assert calls_of("cat").get("cpu_fallback") == 1


def test_a_python_kernel_runs_only_for_its_size_class(gems):
    seen = []

    def add(a, b, *, alpha=1):
        seen.append(a.numel())
        return torch.add(a, b, alpha=alpha)

    gems(**{"add.Tensor": add})
    use_rules("add.Tensor[float32, numel>=100] = flaggems_python\n")
    small, big = torch.ones(4, device="flagos"), torch.ones(10, 10, device="flagos")
    assert (small + small).cpu().tolist() == [2.0] * 4
    torch.testing.assert_close((big + big).cpu(), torch.full((10, 10), 2.0))
    assert seen == [100]


def test_replay_recordings_do_not_outlive_a_size_class(gems):
    seen = []

    def add(a, b, *, alpha=1):
        seen.append(a.numel())
        return torch.add(a, b, alpha=alpha)

    gems(**{"add.Tensor": add})
    use_rules("add.Tensor[float32, numel>=100] = flaggems\n")
    big = torch.ones(10, 10, device="flagos")
    for _ in range(3):
        big + big
    assert seen == [100]  # recorded once, replayed after
    assert torch_fl._C.PyRoute("add.Tensor").replay_stats()["hits"] >= 1
    # float32 keeps a fast class, but the recorded signature's size is below it now: it must not replay
    use_rules("add.Tensor[float32, numel>=1000] = flaggems\n")
    routing.reset_stats()
    torch.testing.assert_close((big + big).cpu(), torch.full((10, 10), 2.0))
    assert calls_of("add.Tensor").get("flaggems", 0) == 0
    assert seen == [100]


# --- recording ------------------------------------------------------------------------------------------------


def test_recording_counts_signatures_and_keeps_copies_before_the_call():
    a, b = torch.ones(4, 4, device="flagos"), torch.ones(2, 8, device="flagos")

    def work():
        for _ in range(3):
            a @ a
        b @ b.t()
        a.add_(1.0)

    rec = record.record(work, lambda op: op in ("mm", "add_.Scalar", "add_.Tensor"))
    mm = sorted((c for c in rec.calls.values() if c.key.op == "mm"), key=lambda c: c.count)
    assert [(c.numel, c.count, c.shapes) for c in mm] == [(16, 1, "2x8, 8x2"), (16, 3, "4x4, 4x4")]
    assert {c.key.dtype for c in mm} == {torch.float32}
    inplace = [c for c in rec.calls.values() if c.key.op.startswith("add_")]
    assert len(inplace) == 1 and inplace[0].args[0].cpu().eq(1).all()  # the copy predates the call
    assert rec.total >= 5


def test_recording_keeps_at_most_per_op_examples():
    x = torch.ones(1, device="flagos")

    def work():
        for n in range(1, 6):
            torch.ones(n, device="flagos") + x

    rec = record.record(work, lambda op: op == "add.Tensor", per_op=2)
    adds = list(rec.calls.values())
    assert len(adds) == 5 and sum(c.kept for c in adds) == 2


# --- classes and the file -------------------------------------------------------------------------------------


def m(op, numel, native_us, cand_us, count=1, reason=None, dtype=torch.float32, shape=None):
    call = Recorded(CallKey(op, dtype, (shape or numel,)), numel, count, kept=True)
    return measure.Measurement(call, native_us * 1e-6, None if reason else cand_us * 1e-6, reason)


def test_classes_merge_neighbours_and_weigh_by_calls():
    ms = [
        m("mm", 16, 10, 20),
        m("mm", 64, 10, 15),
        m("mm", 256, 50, 20),
        m("mm", 256, 50, 60, count=1, shape=(2, 128)),  # same size, slower: weighted together
        m("mm", 1024, 100, 30, count=5),
        m("mm", 4096, 100, 99),  # within min_speedup: native
    ]
    cs = decide.size_classes(ms, "flaggems", min_speedup=1.05)
    assert [(c.rule, c.calls, c.shapes) for c in cs] == [
        ("mm[float32] = native", 2, 2),
        ("mm[float32, numel>=256] = flaggems", 7, 3),
        ("mm[float32, numel>=4096] = native", 1, 1),
    ]
    assert cs[1].saved_s == pytest.approx((600 - 230) * 1e-6)
    assert "native 85.7 us, flaggems 32.9 us (2.61x), 7 calls, 3 shapes, numel 256..1024" in cs[1].comment


def test_a_rejected_signature_keeps_its_size_native_with_the_reason():
    cs = decide.size_classes([m("mm", 16, 10, 1), m("mm", 64, 10, 0, reason="results differ")], "flaggems")
    assert [c.rule for c in cs] == ["mm[float32] = flaggems", "mm[float32, numel>=64] = native"]
    assert "flaggems rejected: results differ" in cs[1].comment


def test_rendered_rules_reparse_and_carry_their_measurements():
    cs = decide.size_classes([m("mm", 16, 10, 20), m("mm", 64, 10, 2), m("abs", 8, 5, 1)], "flaggems")
    text = decide.render(cs, ["header"], "builtin:backends_cpu.conf")
    rs = config.parse_text(text, "cal.conf")
    by = {r.written: r for r in rs if r.file == "cal.conf"}
    assert set(by) == {"abs[float32] = flaggems", "mm[float32] = native", "mm[float32, numel>=64] = flaggems"}
    assert measured(by["mm[float32, numel>=64] = flaggems"]).startswith("native 10.0 us, flaggems 2.0 us (5.00x)")


# --- calibrate end to end, with a fake timer ------------------------------------------------------------------


def workload_timer(cost: dict[str, float], calls: list | None = None):
    """A fake workload timer: 1 s per run, plus cost[op] for each call of op that ran off native (negative:
    faster); `calls` collects which routing each run had (the routed ops' backends)."""

    def timer(fn):
        routing.reset_stats()
        fn()
        off = [s for s in routing.stats() if s.backend != "native"]
        if calls is not None:
            calls.append(sorted({s.op for s in off}))
        return 1.0 + sum(cost.get(s.op, -1e-3) * s.calls for s in off)

    return timer


@pytest.fixture(autouse=True)
def routed_is_faster(monkeypatch):
    """calibrate's default workload timer, faked: every call routed off native makes the workload faster."""
    monkeypatch.setattr(confirm, "synchronized_timer", lambda device: workload_timer({}))


def fake_timer(fast_from: int):
    """The candidate takes 1 us from `fast_from` elements up and 20 us below; native always 10 us."""

    def timer(run, call, backend):
        run()
        if backend == "native":
            return 10e-6
        return 1e-6 if call.numel >= fast_from else 20e-6

    return timer


def workload():
    for n in (4, 8, 16, 32):
        x = torch.ones(n, n, device="flagos")
        for _ in range(2):
            x @ x


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


def test_calibrate_rejects_a_wrong_or_failing_candidate(gems, tmp_path):
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


def mixed_workload():
    x = torch.ones(8, 8, device="flagos")
    for _ in range(4):
        x @ x
    torch.abs(x)


def test_confirmation_keeps_the_classes_the_workload_confirms(routing_state, tmp_path):  # noqa: F811
    """Every class wins alone (the fake per-call timer); on the workload routed abs costs more than routed mm
    saves, so the set loses, and the half with the largest measured saving (mm: more calls) is kept."""
    out, runs = tmp_path / "cal.conf", []
    before = routing.config_file()
    result = torch_fl.calibrate(
        mixed_workload,
        str(out),
        candidate="cpu_fallback",
        timer=fake_timer(1),
        rounds=1,
        progress=False,
        confirm_pairs=2,
        workload_timer=workload_timer({"mm": -1e-3, "abs": 1e-2}, runs),
    )
    assert [(t.kept, t.won) for t in result.trials] == [(2, False), (1, True)]
    assert result.trials[0].ratio == pytest.approx(1.0 / (1 + 1e-2 - 4e-3))
    assert result.trials[1].ratio == pytest.approx(1.0 / (1 - 4e-3)) and result.trials[1].noise == 0
    # each trial: pairs in ABBA order, each run of one side in a row after an untimed run of that side
    # (the routing change before it drops recordings): [] is all native
    n, r = [], ["abs", "mm"]
    assert runs[:7] == [n, n, r, r, r, n, n]
    assert runs[7:] == [n, n, ["mm"], ["mm"], ["mm"], n, n]
    assert {c.rule for c in result.classes} == {"mm[float32] = cpu_fallback", "abs[float32] = native"}
    [dropped] = [c for c in result.classes if c.op == "abs"]
    assert dropped.note == confirm.DROPPED and dropped.saved_s == 0
    text = out.read_text()
    assert "abs[float32] = native" in text and confirm.DROPPED in text
    assert "confirmed on the workload: 1 class routed: 1.004x" in result.summary()
    assert "; 1 class that won alone left native" in result.summary()
    assert config.check_file(str(out))[1] == []
    assert routing.config_file() == before  # the trials' routing is undone


def calibrate_mixed(tmp_path, pairs: int, timer):
    """mixed_workload calibrated with every class winning alone, confirmed by `timer` over `pairs` pairs."""
    return torch_fl.calibrate(
        mixed_workload,
        str(tmp_path / "c.conf"),
        candidate="cpu_fallback",
        timer=fake_timer(1),
        rounds=1,
        progress=False,
        confirm_pairs=pairs,
        workload_timer=timer,
    )


def test_no_confirmed_set_leaves_every_class_native(routing_state, tmp_path):  # noqa: F811
    result = calibrate_mixed(tmp_path, 1, workload_timer({"mm": 1e-3, "abs": 1e-3}))
    assert [t.kept for t in result.trials] == [2, 1] and not result.trials[-1].won
    assert result.routed == [] and all(c.note == confirm.DROPPED for c in result.classes)
    assert "not confirmed on the workload (2 classes routed: 0.99" in result.summary()
    assert "no class is faster" not in result.summary()  # they were, alone


def test_a_gain_inside_the_noise_is_not_confirmed(routing_state, tmp_path):  # noqa: F811
    """Routed is faster in the median pair, but the pairs scatter more than that: no evidence, so no class
    is kept (a trial wins only by more than its noise)."""
    native_runs = itertools.count()

    def noisy(fn):
        seconds = workload_timer({"mm": -1e-3, "abs": -1e-3})(fn)
        if seconds == 1.0:  # a native run: 3 % slower or faster, in turn
            seconds += 0.03 if next(native_runs) % 2 else -0.03
        return seconds

    result = calibrate_mixed(tmp_path, 4, noisy)
    first = result.trials[0]
    assert first.ratio > 1.0 and first.noise > first.ratio - 1.0 and not first.won
    assert all(not t.won for t in result.trials) and result.routed == []
    assert all(c.backend == "native" and c.note == confirm.DROPPED for c in result.classes)


def test_confirmation_can_be_turned_off_and_is_checked(routing_state, tmp_path, capsys):  # noqa: F811
    result = torch_fl.calibrate(
        mixed_workload, candidate="cpu_fallback", timer=fake_timer(1), rounds=1, progress=False, confirm_pairs=0
    )
    assert result.trials == [] and len(result.routed) == 2
    assert "confirmation pairs" in result.text and "confirmed on the workload" not in result.text
    with pytest.raises(ValueError, match="confirm_pairs must be 0"):
        torch_fl.calibrate(mixed_workload, candidate="cpu_fallback", confirm_pairs=-1)
    assert main(["calibrate", "--confirm", "-1", "--isolate", "on"]) == 2
    assert "--confirm -1" in capsys.readouterr().err


def test_using_config_swaps_the_file_layer_for_a_block(routing_state, tmp_path):  # noqa: F811
    path = tmp_path / "swap.conf"
    path.write_text(f"include {calibration.default_include()}\nabs = cpu_fallback\n")
    before, x = routing.config_file(), torch.ones(2, device="flagos")
    with routing.using_config(str(path)):
        assert routing.config_file() == str(path)
        routing.reset_stats()
        torch.abs(x)
        assert calls_of("abs") == {"cpu_fallback": 1}
    assert routing.config_file() == before
    routing.reset_stats()
    torch.abs(x)
    assert "cpu_fallback" not in calls_of("abs")
