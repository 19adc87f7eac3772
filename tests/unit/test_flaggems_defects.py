"""Known FlagGems defects (torch_fl/backends/flaggems_defects.py): the calls a FlagGems function gets wrong
never reach it; they run natively, counted and warned. Host tests with stand-ins named like the real functions.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from tests.unit.routing_fixtures import flag_gems_with
from torch_fl import routing
from torch_fl.backends import flaggems
from torch_fl.vocab.errors import FallbackWarning

pytestmark = pytest.mark.anyplatform


def row(op, backend):
    return next((s for s in routing.stats() if s.op == op and s.backend == backend), None)


@pytest.mark.parametrize("route", ["flaggems", "flagos_python"], ids=["fast_path", "python_path"])
def test_a_known_flaggems_defect_is_refused_before_it_runs(routing_state, route):
    """FlagGems 5.0.2's Hopper mul reads two same-rank tensors as flat arrays of one shape: on a broadcast
    (Qwen3's q * cos) it faults the GPU. Such calls never reach it: they run natively, counted and warned
    (the fast path checks when it records a signature)."""
    calls = []

    def mul(A, B):
        calls.append(type(B).__name__)
        return torch.mul(A, B)

    mul.__module__ = "flag_gems.runtime.backend._nvidia.hopper.ops.mul"
    flaggems.LOADER.use_module(flag_gems_with({"mul.Tensor": mul}))
    try:
        routing.reset_stats()
        routing.set_route("mul.Tensor", route)
        a = torch.arange(6.0, device="flagos").reshape(2, 3)
        assert torch.equal((a * a).cpu(), a.cpu() * a.cpu()) and calls == ["Tensor"]  # what it gets right
        assert torch.equal((a * 2).cpu(), a.cpu() * 2) and calls == ["Tensor", "int"]  # its general kernel
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            col = torch.ones(2, 1, device="flagos")
            assert torch.equal((a * col).cpu(), a.cpu())  # a broadcast, natively
            assert torch.equal((a.t() * a.t()).cpu(), (a.cpu() * a.cpu()).t())  # strided
        assert calls == ["Tensor", "int"]
        msgs = [str(m.message) for m in w if issubclass(m.category, FallbackWarning)]
        assert len(msgs) == 1 and "Hopper mul" in msgs[0] and "(2, 3)" in msgs[0] and "(2, 1)" in msgs[0]
        stat = "flaggems" if route == "flaggems" else "flaggems_python"  # stats use the canonical name
        assert row("mul.Tensor", stat) == routing.OpStat("mul.Tensor", stat, 3, 2, 1)
    finally:
        flaggems.LOADER.reset()


@pytest.mark.parametrize(
    ("a", "b", "refused"),
    [
        (torch.ones(4, 4), torch.ones(4, 4), False),
        (torch.ones(4, 4), torch.ones(4), False),  # ranks differ: FlagGems' broadcasting kernel
        (torch.ones(4, 4), torch.ones(1, 4), True),
        (torch.ones(4, 4), torch.ones(4, 4, dtype=torch.bfloat16), True),
        (torch.ones(4, 4), torch.ones(4, 4).t(), True),
        (torch.ones(()), torch.ones(()), False),
    ],
)
def test_the_hopper_mul_check(a, b, refused):
    from torch_fl.backends import flaggems_defects

    def mul(A, B):
        return A * B

    mul.__module__ = "flag_gems.runtime.backend._nvidia.hopper.ops.mul"
    checked = flaggems_defects.guarded(mul)
    assert checked is not mul and flaggems_defects.guarded(torch.mul) is torch.mul
    if refused:
        with pytest.raises(flaggems_defects.FlagGemsDefect, match="flat arrays"):
            checked(a, b)
    else:
        assert torch.equal(checked(a, b), a * b)
