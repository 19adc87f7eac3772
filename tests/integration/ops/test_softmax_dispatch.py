"""aten::_softmax on flagos (FEP 0025 first phase), reached through torch.softmax."""

import torch

from tests.integration.ops.opcheck import FLOATS, DispatchTests, Inputs, OpSpec, OpTests, tensor

# name: (shape, dim, non-contiguous)
CASES = {
    "last": ((4, 5), -1, False),
    "first": ((4, 5), 0, False),
    "batch": ((2, 3, 4), 1, False),
    "vector": ((7,), 0, False),
    "scalar0d": ((), 0, False),
    "empty": ((0, 5), 1, False),
    "noncontig": ((5, 6), 1, True),
}
INPUTS = [
    Inputs(n, lambda dt, g, s=s, d=d, nc=nc: ((tensor(s, dt, g, noncontiguous=nc), d), {}))
    for n, (s, d, nc) in CASES.items()
]

SPEC = OpSpec(
    overload="_softmax",
    fn=torch.softmax,
    inputs=INPUTS,
    dtypes=FLOATS,
    grad=True,
    setup="x = torch.randn(4, 5, device='flagos')",
    call="torch.softmax(x, 1)",
)


class TestSoftmax(OpTests):
    spec = SPEC


class TestSoftmaxDispatch(DispatchTests):
    spec = SPEC
