"""What calibrate measures and decides from: the calls a workload makes (recording), the size classes made from
per-call measurements, and the rules written for them (re-parsed with their measurements).
"""

from __future__ import annotations

import pytest
import torch

from torch_fl.calibration import decide, measure, record
from torch_fl.calibration.record import CallKey, Recorded
from torch_fl.routing import config
from torch_fl.routing.explain import measured

pytestmark = pytest.mark.anyplatform


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


def m(op, numel, native_us, cand_us, count=1, reason=None, dtype=torch.float32, shape=None, value=None):
    call = Recorded(CallKey(op, dtype, (shape or numel, value)), numel, count, kept=True, value=value)
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


def test_recording_notes_the_class_argument_default_included():
    x = torch.ones(4, device="flagos")

    def work():
        x**2, x**3.5, torch.add(x, x), torch.add(x, x, alpha=2), x.abs()

    rec = record.record(work, lambda op: op in ("pow.Tensor_Scalar", "add.Tensor", "abs"))
    values = sorted((c.key.op, c.value) for c in rec.calls.values())
    assert values == [
        ("abs", None),
        ("add.Tensor", 1),
        ("add.Tensor", 2),
        ("pow.Tensor_Scalar", 2),
        ("pow.Tensor_Scalar", 3.5),
    ]


def test_argument_values_the_candidate_wins_for_get_rules_of_their_own():
    ms = [
        m("pow.Tensor_Scalar", 64, 10, 20, count=4, value=2),  # x*x natively: the candidate loses
        m("pow.Tensor_Scalar", 64, 30, 10, count=2, value=3),
        m("pow.Tensor_Scalar", 4096, 40, 50, value=3),
        m("pow.Tensor_Scalar", 64, 30, 12, value=0.5),
        m("mm", 16, 10, 5, value=None),
    ]
    cs = decide.size_classes(ms, "flaggems")
    assert [c.rule for c in cs] == [
        "mm[float32] = flaggems",
        "pow.Tensor_Scalar[float32] = native",
        "pow.Tensor_Scalar[float32, exponent=0.5] = flaggems",
        "pow.Tensor_Scalar[float32, exponent=3] = flaggems",
        "pow.Tensor_Scalar[float32, exponent=3, numel>=4096] = native",
    ]
    assert "4 calls" in cs[1].comment and decide.OTHER_VALUES in cs[1].comment
    rs = config.parse_text(decide.render(cs, [], None), "cal.conf")  # the file says it back
    assert {r.arg for r in rs} == {None, ("exponent", 0.5), ("exponent", 3)}
    # every value the candidate wins for (or loses for) alike: no argument classes
    same = [m("pow.Tensor_Scalar", 64, 30, 10, value=v) for v in (2, 3)]
    assert [c.rule for c in decide.size_classes(same, "flaggems")] == ["pow.Tensor_Scalar[float32] = flaggems"]
