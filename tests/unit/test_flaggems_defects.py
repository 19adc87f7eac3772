"""Known FlagGems defects (torch_fl/backends/flaggems_defects.py): the calls a FlagGems function gets wrong
never reach it; they run natively, counted and warned. Host tests with stand-ins defined in files of the real
functions' paths and imported under the module names FlagGems gives them (`hopper.ops.mul`); a GPU test
checks the real FlagGems table on Hopper.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from tests.unit.routing_fixtures import flag_gems_with
from torch_fl import routing
from torch_fl.backends import flaggems, flaggems_defects
from torch_fl.vocab.errors import FallbackWarning

pytestmark = pytest.mark.anyplatform


HOPPER = "/venv/site-packages/flag_gems/runtime/backend/_nvidia/hopper/ops/"


def hopper_function(file: str, source: str, name: str, **names):
    """`name` from `source`, compiled as if from FlagGems' Hopper ops `file` and imported as FlagGems does."""
    scope = {"torch": torch, "__name__": f"hopper.ops.{file.removesuffix('.py')}", **names}
    exec(compile(source, HOPPER + file, "exec"), scope)
    return scope[name]


def row(op, backend):
    return next((s for s in routing.stats() if s.op == op and s.backend == backend), None)


@pytest.mark.parametrize("route", ["flaggems", "flagos_python"], ids=["replay", "python_path"])
def test_a_known_flaggems_defect_is_refused_before_it_runs(routing_state, route):
    """FlagGems 5.0.2's Hopper mul reads two same-rank tensors as flat arrays of one shape: on a broadcast
    (Qwen3's q * cos) it faults the GPU. Such calls never reach it: they run natively, counted and warned
    (replay checks when it records a signature)."""
    calls = []
    source = "def mul(A, B):\n    calls.append(type(B).__name__)\n    return torch.mul(A, B)\n"
    mul = hopper_function("mul.py", source, "mul", calls=calls)
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
        ("flagos", torch.ones(()), True),  # a host scalar tensor: its kernel would read host memory
    ],
)
def test_the_hopper_mul_check(a, b, refused):
    a = torch.ones((), device=a) if isinstance(a, str) else a
    mul = hopper_function("mul.py", "def mul(A, B):\n    return A * B\n", "mul")
    checked = flaggems_defects.guarded(mul)
    assert checked is not mul and flaggems_defects.guarded(torch.mul) is torch.mul
    for fn in (mul, checked):  # refusal() answers for the function and for its guarded wrapper
        assert (flaggems_defects.refusal(fn, a, b) is not None) == refused
    assert flaggems_defects.refusal(torch.mul, a, b) is None
    if refused:
        with pytest.raises(flaggems_defects.FlagGemsDefect, match="flat arrays"):
            checked(a, b)
    else:
        assert torch.equal(checked(a, b).cpu(), (a * b).cpu())


def test_defects_are_matched_by_file_and_name_not_module():
    """FlagGems imports its Hopper ops as `hopper.ops.mul`; a function of that name elsewhere is not matched,
    nor one that a release moved to another file."""
    mul = hopper_function("mul.py", "def mul(A, B):\n    return A * B\n", "mul")
    assert mul.__module__ == "hopper.ops.mul"
    assert flaggems_defects.location(mul) == ("runtime/backend/_nvidia/hopper/ops/mul.py", "mul")
    assert flaggems_defects.guarded(mul) is not mul
    moved = hopper_function("mul2.py", "def mul(A, B):\n    return A * B\n", "mul")
    assert flaggems_defects.guarded(moved) is moved
    assert flaggems_defects.location(torch.mul) is None and flaggems_defects.guarded(torch.mul) is torch.mul


@pytest.mark.parametrize(
    ("file", "name", "call", "refused"),
    [
        ("sqrt.py", "sqrt", lambda f: f(torch.ones(4, 4)), False),
        ("sqrt.py", "sqrt", lambda f: f(torch.ones(4, 8)[:, :4]), True),  # strided: wrong elements
        ("sqrt.py", "sqrt", lambda f: f(torch.ones(4).expand(4, 4)), True),  # expanded: reads past its storage
        ("sqrt.py", "sqrt", lambda f: f(torch.ones(4, dtype=torch.int64)), True),  # PyTorch promotes to float
        ("sqrt.py", "sqrt_", lambda f: f(torch.ones(4, 4).t()), True),
        ("fill.py", "fill_scalar_", lambda f: f(torch.ones(4, 4), 2.0), False),
        ("fill.py", "fill_scalar_", lambda f: f(torch.ones(4, 8)[:, :4], 2.0), True),  # writes outside the view
        ("fill.py", "fill_tensor_", lambda f: f(torch.ones(4, 8)[:, :4], torch.tensor(2.0)), True),
        ("fill.py", "fill_scalar_out", lambda f: f(torch.ones(4, 8)[:, :4], 2.0), False),  # out= decides
        ("fill.py", "fill_scalar_out", lambda f: f(torch.ones(4), 2.0, out=torch.ones(4, 8)[:, :4]), True),
        ("fill.py", "fill_tensor_out", lambda f: f(torch.ones(4), torch.tensor(2.0), out=torch.ones(8)[::2]), True),
    ],
)
def test_the_hopper_flat_kernel_checks(file, name, call, refused):
    """FlagGems 5.0.2's Hopper sqrt and fill run one flat kernel over the element count, ignoring strides."""
    fn = hopper_function(file, f"def {name}(*args, **kwargs):\n    return 'ran'\n", name)
    checked = flaggems_defects.guarded(fn)
    if refused:
        with pytest.raises(flaggems_defects.FlagGemsDefect, match="flat kernel"):
            call(checked)
    else:
        assert call(checked) == "ran"


@pytest.mark.flaggems
def test_the_real_hopper_mul_is_guarded():
    """On a Hopper GPU FlagGems' table maps mul.Tensor to its Hopper mul: that function must be the guarded
    one (it was not matched while defects were keyed by module name)."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("FlagGems uses its Hopper mul only on compute capability 9.0")
    flaggems.LOADER.load()
    if flaggems.LOADER.reason:
        pytest.skip(flaggems.LOADER.reason)
    fn = flaggems.LOADER.table["mul.Tensor"]
    assert flaggems_defects.location(getattr(fn, "__wrapped__", fn)) == (
        "runtime/backend/_nvidia/hopper/ops/mul.py",
        "mul",
    )
    assert fn is not getattr(fn, "__wrapped__", fn)
    with pytest.raises(flaggems_defects.FlagGemsDefect):
        fn(torch.ones(2, 3, device="cuda"), torch.ones(2, 1, device="cuda"))
