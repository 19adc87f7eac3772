"""aten::neg on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import FLOATS, INTS, DispatchTests, OpTests, unary_spec

SPEC = unary_spec("neg", torch.neg, FLOATS + INTS)


class TestNeg(OpTests):
    spec = SPEC


class TestNegDispatch(DispatchTests):
    spec = SPEC
