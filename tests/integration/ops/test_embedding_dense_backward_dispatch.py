"""aten::embedding_dense_backward on flagos (FEP 0025 first phase); called directly, as autograd does."""

import torch

from tests.integration.ops.opcheck import FLOATS, DispatchTests, Inputs, OpSpec, OpTests, tensor

# name: (index shape, num_weights, padding_idx, scale_grad_by_freq); grad_output is index shape + (4,).
CASES = {
    "vector": ((6,), 10, -1, False),
    "batch": ((2, 3), 10, -1, False),
    "padding_idx": ((3, 5), 10, 0, False),
    "scale_by_freq": ((8,), 5, -1, True),
    "empty": ((0,), 10, -1, False),
}
INPUTS = [
    Inputs(
        n,
        lambda dt, g, i=i, nw=nw, p=p, s=s: (
            (tensor(i + (4,), dt), tensor(i, torch.int64, low=0, high=nw), nw, p, s),
            {},
        ),
    )
    for n, (i, nw, p, s) in CASES.items()
]

SPEC = OpSpec(
    overload="embedding_dense_backward",
    fn=torch.ops.aten.embedding_dense_backward,
    inputs=INPUTS,
    dtypes=FLOATS,
    setup="g = torch.randn(2, 3, device='flagos'); i = torch.tensor([1, 2], device='flagos')",
    call="torch.ops.aten.embedding_dense_backward(g, i, 10, -1, False)",
)


class TestEmbeddingDenseBackward(OpTests):
    spec = SPEC


class TestEmbeddingDenseBackwardDispatch(DispatchTests):
    spec = SPEC
