"""aten::constant_pad_nd on flagos (FEP 0025 first phase), as torch.nn.functional.pad(mode='constant')."""

import torch

from tests.integration.ops.opcheck import FLOATS, INTS, DispatchTests, Inputs, OpSpec, OpTests, tensor

# name: (shape, pad, value, non-contiguous)
CASES = {
    "last_dim": ((4, 5), [1, 2], 0, False),
    "two_dims": ((2, 3, 4), [1, 1, 2, 0], 3, False),
    "negative_crop": ((4, 6), [-1, -2], 0, False),
    "vector": ((5,), [2, 2], -1, False),
    "empty": ((0, 3), [1, 1], 2, False),
    "noncontig": ((5, 6), [0, 3, 1, 0], 1, True),
}
INPUTS = [
    Inputs(n, lambda dt, g, s=s, p=p, v=v, nc=nc: ((tensor(s, dt, g, noncontiguous=nc), p), {"value": v}))
    for n, (s, p, v, nc) in CASES.items()
]

SPEC = OpSpec(
    overload="constant_pad_nd",
    fn=torch.nn.functional.pad,
    inputs=INPUTS,
    dtypes=FLOATS + INTS,
    grad=True,
    setup="x = torch.randn(4, 5, device='flagos')",
    call="torch.ops.aten.constant_pad_nd(x, [1, 1], 0.0)",
)


class TestConstantPadNd(OpTests):
    spec = SPEC


class TestConstantPadNdDispatch(DispatchTests):
    spec = SPEC
