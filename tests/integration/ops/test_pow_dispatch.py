"""aten::pow.Tensor_Scalar on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import FLOATS, INTS, Case, DispatchTests, Inputs, OpSpec, OpTests, unary_inputs

# x ** 3 for every shape and dtype; x ** 0.5 and x ** -2 on positive floats.
CUBE = [Inputs(i.name, lambda dt, g, i=i: (i.build(dt, g)[0] + (3,), {})) for i in unary_inputs()]
FRACTIONAL = [
    Case(Inputs(f"exp{e}-{i.name}", lambda dt, g, i=i, e=e: (i.build(dt, g)[0] + (e,), {})), dt)
    for e in (0.5, -2.0)
    for i in unary_inputs(low=0.5, high=3.0)
    for dt in FLOATS
]

SPEC = OpSpec(
    overload="pow.Tensor_Scalar",
    fn=torch.pow,
    inputs=CUBE,
    dtypes=FLOATS + INTS,
    extra_cases=FRACTIONAL,
    grad=True,
    setup="x = torch.randn(4, 5, device='flagos')",
    call="x ** 3",
)


class TestPow(OpTests):
    spec = SPEC


class TestPowDispatch(DispatchTests):
    spec = SPEC
