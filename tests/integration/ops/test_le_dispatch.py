"""aten::le.Tensor on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import BOOL, FLOATS, INTS, DispatchTests, OpSpec, OpTests, binary_inputs

SPEC = OpSpec(
    overload="le.Tensor",
    fn=torch.le,
    inputs=binary_inputs(low=-3, high=3),  # small integer range: many equal pairs
    dtypes=FLOATS + INTS + BOOL,
    setup="x = torch.randn(4, 5, device='flagos'); y = torch.randn(4, 5, device='flagos')",
    call="x <= y",
)


class TestLe(OpTests):
    spec = SPEC


class TestLeDispatch(DispatchTests):
    spec = SPEC
