"""aten::mm on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import FLOATS, DispatchTests, Inputs, OpSpec, OpTests, tensor, transposed

# name: (a shape, b shape, transpose a, transpose b)
CASES = {
    "square": ((8, 8), (8, 8), False, False),
    "rect": ((4, 5), (5, 3), False, False),
    "vector_like": ((1, 6), (6, 1), False, False),
    "empty_m": ((0, 5), (5, 3), False, False),
    "empty_k": ((4, 0), (0, 3), False, False),
    "transposed_a": ((4, 5), (5, 3), True, False),
    "transposed_both": ((6, 7), (7, 2), True, True),
}


def _mat(shape, dt, g, t):
    return transposed(shape, dt, g) if t else tensor(shape, dt, g)


INPUTS = [
    Inputs(n, lambda dt, g, a=a, b=b, ta=ta, tb=tb: ((_mat(a, dt, g, ta), _mat(b, dt, g, tb)), {}))
    for n, (a, b, ta, tb) in CASES.items()
]

SPEC = OpSpec(
    overload="mm",
    fn=torch.mm,
    inputs=INPUTS,
    dtypes=FLOATS + (torch.int64,),
    grad=True,
    setup="a = torch.randn(4, 5, device='flagos'); b = torch.randn(5, 3, device='flagos')",
    call="a @ b",
    flaggems_autotunes=True,
)


class TestMm(OpTests):
    spec = SPEC


class TestMmDispatch(DispatchTests):
    spec = SPEC
