"""aten::scalar_tensor on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import BOOL, FLOATS, INTS, TARGET, DispatchTests, Inputs, OpSpec, OpTests

VALUES = {"positive": 2.5, "negative": -3.0, "zero": 0.0, "one": 1}
INPUTS = [Inputs(n, lambda dt, g, v=v: ((v,), {"dtype": dt, "device": TARGET})) for n, v in VALUES.items()]

SPEC = OpSpec(
    overload="scalar_tensor",
    fn=torch.scalar_tensor,
    inputs=INPUTS,
    dtypes=FLOATS + INTS + BOOL,
    setup="",
    call="torch.ops.aten.scalar_tensor(2.0, device='flagos')",
)


class TestScalarTensor(OpTests):
    spec = SPEC


class TestScalarTensorDispatch(DispatchTests):
    spec = SPEC
