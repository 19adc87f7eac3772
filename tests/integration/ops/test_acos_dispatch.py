"""aten::acos on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import FLOATS, DispatchTests, OpTests, unary_spec

SPEC = unary_spec("acos", torch.acos, FLOATS, low=-0.95, high=0.95)


class TestAcos(OpTests):
    spec = SPEC


class TestAcosDispatch(DispatchTests):
    spec = SPEC
