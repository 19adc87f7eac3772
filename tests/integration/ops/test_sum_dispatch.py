"""aten::sum.dim_IntList on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import BOOL, FLOATS, INTS, DispatchTests, OpSpec, OpTests, reduction_inputs

# name: (shape, dims, keepdim, non-contiguous)
CASES = {
    "last": ((4, 5), [1], False, False),
    "keepdim": ((4, 5), [0], True, False),
    "multi": ((2, 3, 4), [0, 2], False, False),
    "negative": ((2, 3, 4), [-1], True, False),
    "scalar0d": ((), [0], False, False),
    "empty_rows": ((0, 3), [0], False, False),
    "noncontig": ((5, 6), [1], False, True),
}
INPUTS = reduction_inputs(CASES)


def _flaggems_defect(case):
    # scalar0d: FlagGems raises on a 0-d input and the call falls back; an
    # empty input never reaches FlagGems (docs/routing.md, Fallback rules).
    if case.dtype == torch.int32 and case.inputs.name not in ("scalar0d", "empty_rows"):
        # torch sums integers into int64; flag_gems/ops/sum.py keeps the input dtype.
        return "FlagGems 5.0.2 sum.dim_IntList of int32 returns int32 (torch: int64)"
    return None


SPEC = OpSpec(
    overload="sum.dim_IntList",
    flaggems_defect=_flaggems_defect,
    fn=torch.sum,
    inputs=INPUTS,
    dtypes=FLOATS + INTS + BOOL,
    grad=True,
    setup="x = torch.randn(4, 5, device='flagos')",
    call="x.sum(1)",
)


class TestSum(OpTests):
    spec = SPEC


class TestSumDispatch(DispatchTests):
    spec = SPEC
