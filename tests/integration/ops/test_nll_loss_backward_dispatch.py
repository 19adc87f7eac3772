"""aten::nll_loss_backward on flagos (FEP 0025 first phase); called directly, as autograd does."""

import torch

from tests.integration.ops.opcheck import FLOATS, DispatchTests, Inputs, OpSpec, OpTests, tensor

C = 5
REDUCTION = {"none": 0, "mean": 1, "sum": 2}
# name: (batch, reduction, ignore_index, weighted)
CASES = {
    "mean": (4, "mean", -100, False),
    "sum": (4, "sum", -100, False),
    "none": (4, "none", -100, False),
    "ignore_index": (6, "mean", 1, False),
    "weighted": (4, "mean", -100, True),
}


def _build(dt, n, reduction, ignore, weighted):
    logp = tensor((n, C), dt).log_softmax(-1)
    target = tensor((n,), torch.int64, low=0, high=C)
    weight = tensor((C,), dt, low=0.5, high=2) if weighted else None
    _, total_weight = torch.ops.aten.nll_loss_forward(logp, target, weight, REDUCTION[reduction], ignore)
    grad_out = tensor((n,) if reduction == "none" else (), dt)
    return (grad_out, logp, target, weight, REDUCTION[reduction], ignore, total_weight), {}


INPUTS = [Inputs(n, lambda dt, g, c=c: _build(dt, *c)) for n, c in CASES.items()]

SPEC = OpSpec(
    overload="nll_loss_backward",
    fn=torch.ops.aten.nll_loss_backward,
    inputs=INPUTS,
    dtypes=FLOATS,
    setup=(
        "x = torch.randn(4, 5, device='flagos'); t = torch.tensor([0, 1, 2, 3], device='flagos'); "
        "go = torch.tensor(1.0, device='flagos'); tw = torch.tensor(4.0, device='flagos')"
    ),
    call="torch.ops.aten.nll_loss_backward(go, x, t, None, 1, -100, tw)",
)


class TestNllLossBackward(OpTests):
    spec = SPEC


class TestNllLossBackwardDispatch(DispatchTests):
    spec = SPEC
