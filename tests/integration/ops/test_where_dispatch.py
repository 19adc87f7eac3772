"""aten::where.self on flagos (FEP 0025 first phase)."""

import torch

from tests.integration.ops.opcheck import BOOL, FLOATS, INTS, DispatchTests, Inputs, OpSpec, OpTests, tensor

# (condition shape, x shape, y shape): same, broadcast, 0-d, empty.
SHAPES = {
    "same": ((4, 5), (4, 5), (4, 5)),
    "broadcast": ((4, 1), (1, 5), (4, 5)),
    "scalar0d": ((3, 2), (), (3, 2)),
    "empty": ((0, 5), (0, 5), (1, 5)),
}
INPUTS = [
    Inputs(n, lambda dt, g, c=c, a=a, b=b: ((tensor(c, torch.bool), tensor(a, dt, g), tensor(b, dt, g)), {}))
    for n, (c, a, b) in SHAPES.items()
] + [
    Inputs(
        "noncontig",
        lambda dt, g: (tuple(tensor((3, 4), d, g, noncontiguous=True) for d in (torch.bool, dt, dt)), {}),
    )
]

SPEC = OpSpec(
    overload="where.self",
    fn=torch.where,
    inputs=INPUTS,
    dtypes=FLOATS + INTS + BOOL,
    grad=True,
    setup=(
        "c = torch.randn(4, 5, device='flagos') > 0; x = torch.randn(4, 5, device='flagos'); "
        "y = torch.randn(4, 5, device='flagos')"
    ),
    call="torch.where(c, x, y)",
)


class TestWhere(OpTests):
    spec = SPEC


class TestWhereDispatch(DispatchTests):
    spec = SPEC
