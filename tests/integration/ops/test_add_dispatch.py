"""aten::add.Tensor on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import (
    BOOL,
    FLOATS,
    INTS,
    DispatchTests,
    Inputs,
    OpSpec,
    OpTests,
    binary_inputs,
    tensor,
)

ALPHA = Inputs("alpha", lambda dt, g: ((tensor((3, 4), dt, g), tensor((3, 4), dt, g)), {"alpha": 2}))

SPEC = OpSpec(
    overload="add.Tensor",
    fn=torch.add,
    inputs=binary_inputs() + [ALPHA],
    dtypes=FLOATS + INTS + BOOL,
    grad=True,
    setup="x = torch.randn(4, 5, device='flagos'); y = torch.randn(4, 5, device='flagos')",
    call="x + y",
)


class TestAdd(OpTests):
    spec = SPEC


class TestAddDispatch(DispatchTests):
    spec = SPEC
