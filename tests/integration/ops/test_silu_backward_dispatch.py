"""aten::silu_backward on flagos (FEP 0025 first phase); called directly, as autograd does."""

import torch

from tests.integration.ops.opcheck import FLOATS, DispatchTests, Inputs, OpSpec, OpTests, tensor

SHAPES = {"scalar0d": (), "empty": (0, 3), "vector": (7,), "matrix": (4, 5)}
INPUTS = [Inputs(name, lambda dt, g, s=s: ((tensor(s, dt, g), tensor(s, dt, g)), {})) for name, s in SHAPES.items()] + [
    Inputs("noncontig", lambda dt, g: ((tensor((5, 6), dt, g, noncontiguous=True),) * 2, {}))
]

SPEC = OpSpec(
    overload="silu_backward",
    fn=torch.ops.aten.silu_backward,
    inputs=INPUTS,
    dtypes=FLOATS,
    grad=False,  # torch.ops.aten.silu_backward has no derivative of its own
    setup="g = torch.randn(4, 5, device='flagos'); x = torch.randn(4, 5, device='flagos')",
    call="torch.ops.aten.silu_backward(g, x)",
)


class TestSiluBackward(OpTests):
    spec = SPEC


class TestSiluBackwardDispatch(DispatchTests):
    spec = SPEC
