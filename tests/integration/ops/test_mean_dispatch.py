"""aten::mean.dim on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import FLOATS, DispatchTests, OpSpec, OpTests, reduction_inputs

# name: (shape, dims, keepdim, non-contiguous)
CASES = {
    "last": ((4, 5), [1], False, False),
    "keepdim": ((4, 5), [0], True, False),
    "multi": ((2, 3, 4), [0, 2], False, False),
    "negative": ((2, 3, 4), [-1], True, False),
    "scalar0d": ((), [0], False, False),
    "empty_rows": ((0, 3), [1], False, False),
    "noncontig": ((5, 6), [0], False, True),
}
INPUTS = reduction_inputs(CASES)

SPEC = OpSpec(
    overload="mean.dim",
    fn=torch.mean,
    inputs=INPUTS,
    dtypes=FLOATS,
    grad=True,
    setup="x = torch.randn(4, 5, device='flagos')",
    call="x.mean(1)",
)


class TestMean(OpTests):
    spec = SPEC


class TestMeanDispatch(DispatchTests):
    spec = SPEC
