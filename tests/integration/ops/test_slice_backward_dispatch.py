"""aten::slice_backward on flagos (FEP 0025 first phase); called directly, as autograd does."""

import torch

from tests.integration.ops.opcheck import FLOATS, DispatchTests, Inputs, OpSpec, OpTests, tensor

# name: (input sizes, dim, start, end, step); grad_output has the sliced shape.
CASES = {
    "rows": ([8, 5], 0, 0, 8, 2),
    "cols": ([4, 6], 1, 1, 5, 1),
    "batch": ([2, 6, 3], 1, 2, 6, 3),
    "empty_slice": ([4, 5], 0, 2, 2, 1),
    "end_past_size": ([6], 0, 3, 100, 1),
}


def _sliced(sizes, dim, start, end, step):
    return list(torch.empty(sizes)[(slice(None),) * (dim % len(sizes)) + (slice(start, end, step),)].shape)


INPUTS = [Inputs(n, lambda dt, g, c=c: ((tensor(_sliced(*c), dt, g), *c), {})) for n, c in CASES.items()]

SPEC = OpSpec(
    overload="slice_backward",
    fn=torch.ops.aten.slice_backward,
    inputs=INPUTS,
    dtypes=FLOATS,
    grad=True,
    setup="g = torch.randn(4, 5, device='flagos')",
    call="torch.ops.aten.slice_backward(g, [8, 5], 0, 0, 8, 2)",
)


class TestSliceBackward(OpTests):
    spec = SPEC


class TestSliceBackwardDispatch(DispatchTests):
    spec = SPEC
