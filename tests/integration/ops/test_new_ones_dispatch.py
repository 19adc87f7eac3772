"""aten::new_ones on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import BOOL, FLOATS, INTS, DispatchTests, Inputs, OpSpec, OpTests, tensor

SIZES = {"vector": [3], "matrix": [2, 4], "empty": [2, 0], "scalar0d": []}
INPUTS = [Inputs(n, lambda dt, g, s=s: ((tensor((2, 2), dt), s), {})) for n, s in SIZES.items()]

SPEC = OpSpec(
    overload="new_ones",
    fn=torch.Tensor.new_ones,
    inputs=INPUTS,
    dtypes=FLOATS + INTS + BOOL,
    setup="x = torch.randn(2, 2, device='flagos')",
    call="torch.ops.aten.new_ones(x, [3])",
)


class TestNewOnes(OpTests):
    spec = SPEC


class TestNewOnesDispatch(DispatchTests):
    spec = SPEC
