"""aten::zeros on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import BOOL, FLOATS, INTS, TARGET, DispatchTests, Inputs, OpSpec, OpTests

SIZES = {"vector": [5], "matrix": [3, 4], "empty": [0, 4], "scalar0d": []}
INPUTS = [Inputs(n, lambda dt, g, s=s: ((s,), {"dtype": dt, "device": TARGET})) for n, s in SIZES.items()]

SPEC = OpSpec(
    overload="zeros",
    fn=torch.zeros,
    inputs=INPUTS,
    dtypes=FLOATS + INTS + BOOL,
    setup="",
    call="torch.ops.aten.zeros([3, 4], device='flagos')",
)


class TestZeros(OpTests):
    spec = SPEC


class TestZerosDispatch(DispatchTests):
    spec = SPEC
