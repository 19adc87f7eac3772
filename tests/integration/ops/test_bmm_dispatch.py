"""aten::bmm on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import FLOATS, DispatchTests, Inputs, OpSpec, OpTests, tensor, transposed

# name: (a shape, b shape, transpose a, transpose b)
CASES = {
    "basic": ((2, 4, 5), (2, 5, 3), False, False),
    "single": ((1, 3, 3), (1, 3, 3), False, False),
    "empty_batch": ((0, 4, 5), (0, 5, 3), False, False),
    "empty_k": ((2, 4, 0), (2, 0, 3), False, False),
    "transposed": ((3, 4, 5), (3, 5, 2), True, True),
}


def _mat(shape, dt, g, t):
    return transposed(shape, dt, g) if t else tensor(shape, dt, g)


INPUTS = [
    Inputs(n, lambda dt, g, a=a, b=b, ta=ta, tb=tb: ((_mat(a, dt, g, ta), _mat(b, dt, g, tb)), {}))
    for n, (a, b, ta, tb) in CASES.items()
]

SPEC = OpSpec(
    overload="bmm",
    fn=torch.bmm,
    inputs=INPUTS,
    dtypes=FLOATS,
    grad=True,
    setup="a = torch.randn(2, 4, 5, device='flagos'); b = torch.randn(2, 5, 3, device='flagos')",
    call="torch.bmm(a, b)",
    flaggems_autotunes=True,
)


class TestBmm(OpTests):
    spec = SPEC


class TestBmmDispatch(DispatchTests):
    spec = SPEC
