"""The demo's verdict on flagos's tokens against native's: logits beyond
tolerance are a defect; identical tokens agree; a difference agrees only when
other kernels than native ran; anything else is reported as a defect (exit
status 1)."""

from __future__ import annotations

import pytest
import torch

from torch_fl.cli.demo import agreement, first_difference
from torch_fl.routing import OpStat
from torch_fl.routing.summary import non_native_ops

pytestmark = pytest.mark.anyplatform

PROMPT = 3


def _outs(native: list[list[int]], flagos: list[list[int]]) -> dict[str, list[torch.Tensor]]:
    def gen(tokens):
        return torch.tensor([[7] * PROMPT + tokens])

    return {"native": [gen(t) for t in native], "flagos": [gen(t) for t in flagos]}


def test_first_difference_is_the_first_generated_position_any_round_leaves_native():
    assert first_difference(_outs([[1, 2, 3]] * 2, [[1, 2, 3]] * 2), PROMPT) is None
    assert first_difference(_outs([[1, 2, 3]], [[1, 2, 9]]), PROMPT) == 2
    # a later flagos round, or a native round that disagrees with native's first, counts too
    assert first_difference(_outs([[1, 2, 3]], [[1, 2, 3], [5, 2, 3]]), PROMPT) == 0
    assert first_difference(_outs([[1, 2, 3], [1, 4, 3]], [[1, 2, 3]]), PROMPT) == 1


def test_identical_tokens_agree_with_nothing_to_explain():
    assert agreement(None, logits_close=True, other_kernels={}) == (True, [])


def test_logits_beyond_tolerance_are_a_defect_even_with_identical_tokens():
    ok, why = agreement(None, logits_close=False, other_kernels={"flaggems": ["mm"]})
    assert not ok and len(why) == 1 and "this is a defect" in why[0] and "beyond the tolerance" in why[0]


def test_a_difference_after_other_kernels_within_tolerance_is_explained():
    ok, why = agreement(4, logits_close=True, other_kernels={"flaggems": ["add.Tensor", "rsqrt"]})
    text = "\n".join(why)
    assert ok
    assert "flaggems: add.Tensor, rsqrt" in text and "round differently" in text and "within tolerance" in text


@pytest.mark.parametrize(
    "logits_close,other,reason",
    [
        (True, {}, "every operator ran native's own kernels"),
        (False, {}, "the logits differ beyond the tolerance"),
        (False, {"flaggems": ["mm"]}, "the logits differ beyond the tolerance"),
    ],
)
def test_any_other_difference_is_a_defect(logits_close, other, reason):
    ok, why = agreement(0, logits_close=logits_close, other_kernels=other)
    assert not ok
    assert len(why) == 1 and "this is a defect" in why[0] and reason in why[0] and "report it" in why[0]


def test_non_native_ops_lists_what_ran_elsewhere_per_backend():
    rows = [
        OpStat("mm", "native", 5, 0, 0),
        OpStat("add.Tensor", "flaggems", 3, 0, 0),
        OpStat("rsqrt", "flaggems", 2, 0, 0),
        OpStat("sin", "flaggems", 0, 4, 0),  # routed there, but every call fell back to native
        OpStat("nonzero", "cpu_fallback", 1, 0, 0),
    ]
    assert non_native_ops(rows) == {"flaggems": ["add.Tensor", "rsqrt"], "cpu_fallback": ["nonzero"]}
