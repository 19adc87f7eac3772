"""aten::silu on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import FLOATS, DispatchTests, OpTests, unary_spec

SPEC = unary_spec("silu", torch.nn.functional.silu, FLOATS)


class TestSilu(OpTests):
    spec = SPEC


class TestSiluDispatch(DispatchTests):
    spec = SPEC
