"""aten::abs on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import FLOATS, INTS, DispatchTests, OpTests, unary_spec

# abs is a composite kernel (empty + abs.out): the device sees abs.out.
SPEC = unary_spec("abs", torch.abs, FLOATS + INTS, reaches=("abs.out",))


class TestAbs(OpTests):
    spec = SPEC


class TestAbsDispatch(DispatchTests):
    spec = SPEC
