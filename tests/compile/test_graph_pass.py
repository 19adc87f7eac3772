"""flagos graphs as the same graphs on cuda: the post-grad pass (torch_fl/compile/graph_pass.py) and SDPA's boolean
mask (torch_fl/compile/attention.py) on traced graphs. Inductor names and caches a fused kernel after its nodes and
their origins: where those match, the kernels and their tuned configurations are CUDA's, and so are the bits."""

from __future__ import annotations

import math

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import torch_fl  # noqa: F401
from torch_fl.compile.attention import _additive
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


def test_the_new_nodes_carry_the_bmms_origin():
    # What inductor's own bmm rewrite on cuda graphs carries over: the fused kernels are named after it.
    a, b = torch.randn(1, 64, 1, device="flagos"), torch.randn(1, 1, 32, device="flagos")
    gm = make_fx(rotary, tracing_mode="fake")(a, b)
    bmm = next(n for n in gm.graph.nodes if n.target is aten.bmm.default)
    origin = {"original_aten": aten.bmm.default, "source_fn_stack": [("matmul", torch.matmul)], "stack_trace": "x"}
    bmm.meta.update(origin)
    bmm_batch_of_one_to_mm(gm)
    new = [n for n in gm.graph.nodes if n.target in (aten.squeeze.dim, aten.mm.default, aten.unsqueeze.default)]
    assert len(new) == 4
    for node in new:
        assert {k: node.meta.get(k) for k in origin} == origin, node


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


def _calls(fn, *args) -> list:
    """(operator, arguments) of each call in fn's traced graph; where's arguments without the mask."""
    nodes = [n for n in make_fx(fn)(*args).graph.nodes if n.op == "call_function"]
    return [(n.target, n.args[1:] if n.target is aten.where.self else n.args) for n in nodes]


@pytest.mark.parametrize("masked", [-math.inf, -65504.0])  # PyTorch's values: its kernels, and cuDNN's
def test_a_boolean_mask_is_made_additive_as_pytorchs_sdpa_does(masked):
    q, mask = torch.randn(1, 2, 4, 8), torch.rand(1, 1, 4, 4) > 0.3
    native = _calls(lambda q, m: torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=m), q, mask)
    ours = _calls(lambda m: _additive(m, torch.float32, masked), mask)
    assert [t for t, _ in ours] == [t for t, _ in native[:3]]  # scalar_tensor, scalar_tensor, where: in this order
    assert ours[0][1] == (masked,) and native[0][1] == (-math.inf,) and ours[1][1] == native[1][1] == (0.0,)
    got = _additive(mask, torch.bfloat16, masked)
    assert got.dtype == torch.bfloat16 and torch.equal(got == 0, mask) and bool((got[~mask] == masked).all())
