"""aten::nll_loss_forward on flagos (FEP 0025 first phase), as torch.nn.functional.nll_loss."""

import torch

from tests.integration.ops.opcheck import FLOATS, DispatchTests, Inputs, OpSpec, OpTests, tensor

C = 5
# name: (input shape, target shape, kwargs); targets in range, log-probabilities as input.
CASES = {
    "mean": ((4, C), (4,), {}),
    "sum": ((4, C), (4,), {"reduction": "sum"}),
    "none": ((4, C), (4,), {"reduction": "none"}),
    "ignore_index": ((6, C), (6,), {"ignore_index": 1}),
    "weighted": ((4, C), (4,), {"weight": "w"}),
    "unbatched": ((C,), (), {}),
}


def _build(dt, g, x, t, kw):
    logp = tensor(x, dt).log_softmax(-1).detach().requires_grad_(g)
    kw = {k: (tensor((C,), dt, low=0.5, high=2) if v == "w" else v) for k, v in kw.items()}
    return (logp, tensor(t, torch.int64, low=0, high=C)), kw


INPUTS = [Inputs(n, lambda dt, g, c=c: _build(dt, g, *c)) for n, c in CASES.items()]

SPEC = OpSpec(
    overload="nll_loss_forward",
    fn=torch.nn.functional.nll_loss,
    inputs=INPUTS,
    dtypes=FLOATS,
    grad=True,
    setup="x = torch.randn(4, 5, device='flagos'); t = torch.tensor([0, 1, 2, 3], device='flagos')",
    call="torch.nn.functional.nll_loss(x, t)",
)


class TestNllLossForward(OpTests):
    spec = SPEC


class TestNllLossForwardDispatch(DispatchTests):
    spec = SPEC
