"""aten::mul.Tensor on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import BOOL, FLOATS, INTS, DispatchTests, OpSpec, OpTests, binary_inputs


def _flaggems_defect(case):
    # flag_gems' table maps mul.Tensor to its Hopper variant (hopper.ops.mul) on the
    # H200; called directly on CUDA tensors it returns shape (4, 1) for (4, 1) * (1, 5)
    # and wrong values for non-contiguous inputs (scripts/gpu_flaggems_diag.py shows it).
    if case.inputs.name in ("broadcast", "noncontig"):
        return f"FlagGems 5.0.2 Hopper mul.Tensor is wrong for {case.inputs.name} inputs"
    return None


SPEC = OpSpec(
    overload="mul.Tensor",
    flaggems_defect=_flaggems_defect,
    fn=torch.mul,
    inputs=binary_inputs(),
    dtypes=FLOATS + INTS + BOOL,
    grad=True,
    setup="x = torch.randn(4, 5, device='flagos'); y = torch.randn(4, 5, device='flagos')",
    call="x * y",
)


class TestMul(OpTests):
    spec = SPEC


class TestMulDispatch(DispatchTests):
    spec = SPEC
