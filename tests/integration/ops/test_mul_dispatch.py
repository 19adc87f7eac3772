"""aten::mul.Tensor on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import BOOL, FLOATS, INTS, DispatchTests, OpSpec, OpTests, binary_inputs

SPEC = OpSpec(
    overload="mul.Tensor",
    fn=torch.mul,
    inputs=binary_inputs(),
    dtypes=FLOATS + INTS + BOOL,
    grad=True,
    setup="x = torch.randn(4, 5, device='flagos'); y = torch.randn(4, 5, device='flagos')",
    call="x * y",
)


class TestMul(OpTests):
    spec = SPEC


class TestMulDispatch(DispatchTests):
    spec = SPEC
