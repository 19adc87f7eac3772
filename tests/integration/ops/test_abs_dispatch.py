"""aten::abs on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import FLOATS, INTS, DispatchTests, OpTests, unary_spec

SPEC = unary_spec("abs", torch.abs, FLOATS + INTS)


class TestAbs(OpTests):
    spec = SPEC


class TestAbsDispatch(DispatchTests):
    spec = SPEC
