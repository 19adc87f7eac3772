"""aten::bitwise_and.Tensor on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import BOOL, INTS, DispatchTests, OpSpec, OpTests, binary_inputs

SPEC = OpSpec(
    overload="bitwise_and.Tensor",
    fn=torch.bitwise_and,
    inputs=binary_inputs(low=-100, high=100),
    dtypes=INTS + BOOL + (torch.uint8,),
    setup="x = torch.randn(4, 5, device='flagos') > 0; y = torch.randn(4, 5, device='flagos') > 0",
    call="x & y",
)


class TestBitwiseAnd(OpTests):
    spec = SPEC


class TestBitwiseAndDispatch(DispatchTests):
    spec = SPEC
