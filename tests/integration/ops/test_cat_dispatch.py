"""aten::cat on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import BOOL, FLOATS, INTS, DispatchTests, Inputs, OpSpec, OpTests, tensor

# name: (shapes of the inputs, dim, non-contiguous)
CASES = {
    "rows": (((2, 3), (4, 3)), 0, False),
    "cols": (((2, 3), (2, 5)), 1, False),
    "three": (((1, 4), (2, 4), (3, 4)), -2, False),
    "with_empty": (((0, 3), (2, 3)), 0, False),
    "legacy_empty_1d": (((0,), (2, 3)), 0, False),  # a 1-d empty tensor is skipped by cat
    "vectors": (((3,), (4,)), 0, False),
    "noncontig": (((3, 4), (3, 4)), 1, True),
}
INPUTS = [
    Inputs(n, lambda dt, g, ss=ss, d=d, nc=nc: (([tensor(s, dt, g, noncontiguous=nc) for s in ss], d), {}))
    for n, (ss, d, nc) in CASES.items()
]

SPEC = OpSpec(
    overload="cat",
    fn=torch.cat,
    inputs=INPUTS,
    dtypes=FLOATS + INTS + BOOL,
    grad=True,
    setup="x = torch.randn(2, 3, device='flagos'); y = torch.randn(4, 3, device='flagos')",
    call="torch.cat([x, y])",
)


class TestCat(OpTests):
    spec = SPEC


class TestCatDispatch(DispatchTests):
    spec = SPEC
