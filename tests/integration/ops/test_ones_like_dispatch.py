"""aten::ones_like on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import BOOL, FLOATS, INTS, DispatchTests, OpSpec, OpTests, unary_inputs

SPEC = OpSpec(
    overload="ones_like",
    fn=torch.ones_like,
    inputs=unary_inputs(),  # keeps shape, dtype and (for dense inputs) strides
    dtypes=FLOATS + INTS + BOOL,
    setup="x = torch.randn(4, 5, device='flagos')",
    call="torch.ops.aten.ones_like(x)",
)


class TestOnesLike(OpTests):
    spec = SPEC


class TestOnesLikeDispatch(DispatchTests):
    spec = SPEC
