"""flagos's post-grad graph pass (torch_fl/compile/graph_pass.py) on traced graphs of flagos tensors."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import torch_fl  # noqa: F401
from torch_fl.compile.graph_pass import bmm_batch_of_one_to_mm

pytestmark = pytest.mark.anyplatform

aten = torch.ops.aten


def rotary(a, b):
    """Qwen3's rotary frequencies: an expanded (1, M, 1) operand times (1, 1, N), then more work."""
    return torch.bmm(a.expand(1, a.size(1), 1), b).cos() * 2


def _targets(gm) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_a_batch_of_one_becomes_mm_with_the_same_result():
    a, b = torch.randn(1, 64, 1, device="flagos"), torch.randn(1, 1, 32, device="flagos")
    gm = make_fx(rotary, tracing_mode="fake")(a, b)
    assert aten.bmm.default in _targets(gm)
    assert bmm_batch_of_one_to_mm(gm) == 1
    targets = _targets(gm)
    assert aten.bmm.default not in targets and aten.mm.default in targets
    mm = next(n for n in gm.graph.nodes if n.target is aten.mm.default)
    assert mm.meta["val"].shape == (64, 32) and mm.meta["val"].device.type == "flagos"
    out = gm(a, b)
    assert out.device == a.device and out.shape == (1, 64, 32)
    torch.testing.assert_close(out.cpu(), rotary(a.cpu(), b.cpu()))


@pytest.mark.parametrize(
    ("a", "b", "mode"),
    [
        (torch.randn(2, 4, 3), torch.randn(2, 3, 5), "fake"),  # a batch of two
        (torch.randn(3, 4, 3), torch.randn(3, 3, 5), "symbolic"),  # a batch size that may be 1 or not
    ],
)
def test_other_bmms_stay(a, b, mode):
    gm = make_fx(torch.bmm, tracing_mode=mode)(a.to("flagos"), b.to("flagos"))
    assert bmm_batch_of_one_to_mm(gm) == 0 and aten.bmm.default in _targets(gm)


def test_cpu_graphs_are_not_touched():
    gm = make_fx(torch.bmm, tracing_mode="fake")(torch.randn(1, 4, 3), torch.randn(1, 3, 5))
    assert bmm_batch_of_one_to_mm(gm) == 0
