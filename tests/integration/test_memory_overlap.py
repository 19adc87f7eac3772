"""Writes that overlap their own inputs behave as on the backing device.

A kernel learns that an output shares memory with an input by comparing the
tensors' storages: PyTorch raises "unsupported operation: some elements of the
input tensor and the written-to tensor refer to a single memory location" for
a partial overlap, and kernels such as mm(out=) or index_select(out=) work on
a copy or raise where their output is an input. A routed call hands the kernel
native aliases of the flagos tensors; each call's arguments over one flagos
storage share one alias storage, so the kernel sees the overlap a native call
would. Every case runs on flagos and on the backing device (the CPU on host
backing, the GPU over CUDA) and must end the same way: the same error, or the
same values in the whole tensor.
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import NATIVE
from tests.unit.routing_fixtures import fake_gems, routing_state  # noqa: F401
from torch_fl import routing

pytestmark = pytest.mark.anyplatform

IDX = [1, 0, 3]


def pieces(x, n=20, width=2, start=0):
    """`n` views of `width` elements over `x`'s storage, one after another from flat offset `start`: past 16
    tensors a call finds earlier borrows of a storage through an index, not a scan."""
    flat = x.view(-1)
    return [flat[start + i * width : start + (i + 1) * width] for i in range(n)]


def foreach_last_shifted(x):
    """20 pairs, the last one's output overlapping its input partially (the CPU's kernel raises at it)."""
    flat = x.view(-1)
    return torch._foreach_add_(pieces(x, 19, 1) + [flat[20:28]], pieces(x, 19, 1, start=45) + [flat[19:27]])


CASES = {
    # partial overlaps: PyTorch's "unsupported operation"
    "copy_ shifted": lambda x: x[1:].copy_(x[:-1]),
    "add_ shifted": lambda x: x[1:].add_(x[:-1]),
    "add_ transposed": lambda x: x.add_(x.t()),
    "mul out= shifted": lambda x: torch.mul(x[:-1], 2, out=x[1:]),
    "addcmul_ shifted (boxed route)": lambda x: x[1:].addcmul_(x[:-1], x[:-1]),
    "maximum out= shifted (boxed route)": lambda x: torch.maximum(x[:-1], x[1:], out=x[:-1].view(-1)[:8].view(1, 8)),
    "cat out= overlapping": lambda x: torch.cat([x[0], x[1]], out=x[1:3].reshape(-1)),
    "index_select out= of its input": lambda x: torch.index_select(x, 0, torch.tensor(IDX, device=x.device), out=x[:3]),
    "index_add_ from itself": lambda x: x.index_add_(0, torch.tensor(IDX, device=x.device), x[2:5]),
    "scatter_ from itself": lambda x: x.scatter_(0, torch.tensor([[1, 0]], device=x.device), x[:1, 1:3]),
    "masked_scatter_ from itself": lambda x: x[1:].masked_scatter_(x[1:] > 10, x[:-1]),
    # full overlaps and disjoint parts of one storage: allowed
    "add_ itself": lambda x: x.add_(x),
    "mul out= itself": lambda x: torch.mul(x, x, out=x),
    "copy_ disjoint halves": lambda x: x[4:].copy_(x[:4]),
    "add out= disjoint": lambda x: torch.add(x[:2], x[2:4], out=x[4:6]),
    "copy_ column to column": lambda x: x[:, 0].copy_(x[:, 1]),
    "mm out= its own input": lambda x: torch.mm(x, x, out=x),
    "addmm_ with itself": lambda x: x.addmm_(x, x),
    "clamp_ by itself": lambda x: x.clamp_(min=x),
    "_foreach_add_ shifted": lambda x: torch._foreach_add_([x[1:]], [x[:-1]]),
    "_foreach_add_ of 20 pairs, the last shifted": foreach_last_shifted,
    "_foreach_mul_ of 20 tensors by themselves": lambda x: (lambda xs: torch._foreach_mul_(xs, xs))(pieces(x)),
    "_foreach_add of 20 pairs over one storage": lambda x: torch._foreach_add(pieces(x), pieces(x, start=1)),
    # an out= argument the kernel resizes beyond its storage, which an input shares
    "add out= resized past the storage": lambda x: torch.add(x[0], 1, out=x[-1, -1:].resize_(0)),
    "add out= resized within the storage": lambda x: torch.add(x[1], 1, out=x[0, :0]),
}


def outcome(call, device: torch.device):
    x = torch.arange(64, dtype=torch.float32, device=device).reshape(8, 8)
    try:
        r = call(x)
    except RuntimeError as e:
        return "raises", str(e).splitlines()[0]
    # the whole tensor, and the results that are tensors (out= arguments the kernel resized, _foreach lists)
    results = [r] if isinstance(r, torch.Tensor) else list(r) if isinstance(r, (list, tuple)) else []
    return "values", [x.cpu()] + [t.cpu() for t in results]


def assert_same_outcome(call):
    want = outcome(call, NATIVE)
    got = outcome(call, torch.device("flagos"))
    assert got[0] == want[0], f"on the backing device {want}, on flagos {got}"
    if want[0] == "raises":
        assert got[1] == want[1]
    else:
        for g, w in zip(got[1], want[1], strict=True):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("call", CASES.values(), ids=CASES.keys())
def test_native_routes(call):
    assert_same_outcome(call)


def test_the_cases_cover_both_outcomes():
    # the comparison means something only if the backing device raises for some cases and computes others
    kinds = {outcome(call, NATIVE)[0] for call in CASES.values()}
    assert kinds == {"raises", "values"}


def test_an_overlap_raises_before_anything_is_written():
    x = torch.arange(8.0, device="flagos")
    with pytest.raises(RuntimeError, match="unsupported operation: some elements of the input tensor"):
        x[1:].copy_(x[:-1])
    assert x.cpu().tolist() == list(range(8))


def test_arguments_over_one_storage_leave_the_alias_pool_working():
    # a call with two arguments of one storage, then calls with them apart, in a loop
    x = torch.arange(16.0, device="flagos")
    for _ in range(3):
        torch.add(x[:8], x[8:], out=x[8:])
        y = x[:8] * x[:8]
        z = x[:8] + 1
    want = torch.arange(16.0)
    for _ in range(3):
        torch.add(want[:8], want[8:], out=want[8:])
    assert torch.equal(x.cpu(), want)
    assert torch.equal(y.cpu(), want[:8] * want[:8]) and torch.equal(z.cpu(), want[:8] + 1)


OVERLAPS = ["add_ shifted", "index_select out= of its input", "add_ itself", "add out= disjoint"]


@pytest.mark.usefixtures("routing_state")
@pytest.mark.parametrize("name", OVERLAPS)
def test_the_cpu_fallback_route(name):
    ops = ["add_.Tensor", "add.out", "index_select.out"]
    with routing.route(dict.fromkeys(ops, "cpu_fallback")):
        assert_same_outcome(CASES[name])


@pytest.mark.usefixtures("fake_gems")
def test_a_python_route():
    # the fake FlagGems mul_ computes on the aliases it is given: the kernel underneath sees the overlap
    routing.set_route("mul_.Tensor", "flaggems")
    assert_same_outcome(lambda x: x[1:].mul_(x[:-1]))
    assert_same_outcome(lambda x: x.mul_(x))


@pytest.mark.flaggems
@pytest.mark.usefixtures("routing_state")
@pytest.mark.parametrize("backend", ["flaggems", "flagos_python"])
def test_flaggems_kernels_raise_as_native_does(backend):
    # FlagGems' Triton kernels check no overlap themselves: the route does, on the first (recorded) call and on
    # replays alike; full overlaps and disjoint parts still run on FlagGems
    from torch_fl.backends import flaggems

    flaggems.LOADER.load()
    if flaggems.LOADER.module is None:
        pytest.skip("flag_gems is not installed")
    routing.set_route("add_.Tensor", backend)
    routing.set_route("mul_.Tensor", backend)
    for _ in range(3):
        assert_same_outcome(lambda x: x[1:].add_(x[:-1]))
        assert_same_outcome(lambda x: x[:, 1:].mul_(x[:, :-1]))
        assert_same_outcome(lambda x: x.add_(x))
        assert_same_outcome(lambda x: x[4:].mul_(x[:4]))
    rows = {(s.op, s.backend): s for s in routing.stats()}
    label = {"flaggems": "flaggems", "flagos_python": "flaggems_python"}[backend]  # the name stats use
    for op in ("add_.Tensor", "mul_.Tensor"):
        stat = rows[(op, label)]
        assert stat.calls >= 3 and stat.failures == 0 and stat.fallbacks == 0
