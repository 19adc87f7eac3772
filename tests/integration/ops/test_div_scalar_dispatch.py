"""aten::div.Scalar on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import FLOATS, INTS, DispatchTests, Inputs, OpSpec, OpTests, unary_inputs

# x / <python scalar>; integer x gives a float result (true division).
INPUTS = [Inputs(i.name, lambda dt, g, i=i: (i.build(dt, g)[0] + (2.5,), {})) for i in unary_inputs()]

SPEC = OpSpec(
    overload="div.Scalar",
    fn=torch.ops.aten.div.Scalar,
    inputs=INPUTS,
    dtypes=FLOATS + INTS,
    grad=True,
    setup="x = torch.randn(4, 5, device='flagos')",
    call="torch.ops.aten.div.Scalar(x, 2.5)",
)


class TestDivScalar(OpTests):
    spec = SPEC


class TestDivScalarDispatch(DispatchTests):
    spec = SPEC
