"""aten::mul.Scalar on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import FLOATS, INTS, DispatchTests, Inputs, OpSpec, OpTests, unary_inputs

# x * <python scalar>, for each shape of unary_inputs(); an int scalar keeps integer dtypes integer.
INPUTS = [Inputs(i.name, lambda dt, g, i=i: (i.build(dt, g)[0] + (3,), {})) for i in unary_inputs()]

SPEC = OpSpec(
    overload="mul.Scalar",
    fn=torch.ops.aten.mul.Scalar,
    inputs=INPUTS,
    dtypes=FLOATS + INTS,
    grad=True,
    setup="x = torch.randn(4, 5, device='flagos')",
    call="torch.ops.aten.mul.Scalar(x, 2.5)",
)


class TestMulScalar(OpTests):
    spec = SPEC


class TestMulScalarDispatch(DispatchTests):
    spec = SPEC
