"""aten::all (full reduction) on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import BOOL, FLOATS, INTS, DispatchTests, OpSpec, OpTests, unary_inputs

SPEC = OpSpec(
    overload="all",
    fn=torch.all,
    inputs=unary_inputs(low=-1, high=2),  # integer inputs include zeros, so both outcomes occur
    dtypes=BOOL + FLOATS + INTS,
    setup="b = torch.randn(4, 5, device='flagos') > -3",
    call="b.all()",
)


class TestAll(OpTests):
    spec = SPEC


class TestAllDispatch(DispatchTests):
    spec = SPEC
