"""calibrate's confirmation on the workload: the routed classes kept only where the whole workload runs faster
by more than its noise (halving the set until one wins), turned off with confirm_pairs=0; and
routing.using_config, which the trials route through.

The per-call and workload timers are fakes (calibrate_fixtures.py): the tests assert what calibrate keeps
from given times.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import torch_fl
from tests.unit.calibrate_fixtures import calls_of, fake_timer, routed_is_faster, workload_timer  # noqa: F401
from tests.unit.routing_fixtures import routing_state  # noqa: F401  (fixtures)
from torch_fl import calibration, routing
from torch_fl.__main__ import main
from torch_fl.calibration import confirm
from torch_fl.routing import config

pytestmark = pytest.mark.anyplatform


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
