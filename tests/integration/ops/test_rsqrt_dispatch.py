"""aten::rsqrt on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import FLOATS, DispatchTests, OpTests, unary_spec

SPEC = unary_spec("rsqrt", torch.rsqrt, FLOATS, low=0.25, high=4.0)


class TestRsqrt(OpTests):
    spec = SPEC


class TestRsqrtDispatch(DispatchTests):
    spec = SPEC
