"""aten::embedding on flagos (FEP 0025 first phase), as torch.nn.functional.embedding."""

import torch

from tests.integration.ops.opcheck import FLOATS, DispatchTests, Inputs, OpSpec, OpTests, tensor

# name: (weight shape, index shape, padding_idx); indices stay in range.
CASES = {
    "vector": ((10, 4), (6,), None),
    "batch": ((10, 4), (2, 3), None),
    "scalar0d": ((10, 4), (), None),
    "empty": ((10, 4), (0,), None),
    "padding_idx": ((10, 4), (3, 5), 0),
}
INPUTS = [
    Inputs(
        n,
        lambda dt, g, w=w, i=i, p=p: ((tensor(i, torch.int64, low=0, high=w[0]), tensor(w, dt, g)), {"padding_idx": p}),
    )
    for n, (w, i, p) in CASES.items()
]

SPEC = OpSpec(
    overload="embedding",
    fn=torch.nn.functional.embedding,
    inputs=INPUTS,
    dtypes=FLOATS,
    grad=True,
    setup="w = torch.randn(10, 3, device='flagos'); i = torch.tensor([1, 2], device='flagos')",
    call="torch.ops.aten.embedding(w, i)",
)


class TestEmbedding(OpTests):
    spec = SPEC


class TestEmbeddingDispatch(DispatchTests):
    spec = SPEC
