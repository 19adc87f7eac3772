"""aten::sin on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import FLOATS, DispatchTests, OpTests, unary_spec

SPEC = unary_spec("sin", torch.sin, FLOATS)


class TestSin(OpTests):
    spec = SPEC


class TestSinDispatch(DispatchTests):
    spec = SPEC
