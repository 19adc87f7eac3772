"""aten::cos on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import FLOATS, DispatchTests, OpTests, unary_spec

SPEC = unary_spec("cos", torch.cos, FLOATS)


class TestCos(OpTests):
    spec = SPEC


class TestCosDispatch(DispatchTests):
    spec = SPEC
