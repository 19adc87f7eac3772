"""How PyRoute calls a Python kernel (what the FlagGems backend installs, here without its policy, through a
bare PyRoute): the alias objects a kernel is handed and recycled, the results it returns (fresh, kept, a
foreign argument, an out= tensor), keyword-only arguments, and scalar operands as Python numbers, through
the typed fronts as through the boxed kernel.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

import torch_fl
from tests.unit.routing_fixtures import bare_route

pytestmark = pytest.mark.anyplatform


def _neg_routed_to(kernel):
    """-x on flagos with aten::neg routed to `kernel` by a bare PyRoute (what
    the FlagGems backend installs, without its policy)."""
    route = bare_route("neg", kernel)
    try:
        return -torch.arange(3.0, device="flagos")
    finally:
        route.set_native()


def test_a_fresh_result_becomes_flagos_in_place(routing_state):
    made = []

    def neg(x):
        out = torch.neg(x)
        made.append(id(out))  # the kernel keeps no reference to its output
        return out

    y = _neg_routed_to(neg)
    # The caller gets the kernel's own Python object, retagged as flagos.
    assert id(y) == made[0]
    assert y.device.type == "flagos" and torch.equal(y.cpu(), -torch.arange(3.0))


def test_a_result_the_kernel_keeps_stays_native_for_it(routing_state):
    kept = []

    def neg(x):
        out = torch.neg(x)
        kept.append(out)
        return out

    y = _neg_routed_to(neg)
    assert kept[0].device.type == torch_fl.backing() and y.device.type == "flagos"
    assert y is not kept[0]
    y.add_(1)  # one memory, two views of it (it used to be taken from the kernel's tensor)
    assert torch.equal(kept[0].cpu(), -torch.arange(3.0) + 1)


def test_keyword_only_arguments_reach_the_kernel_and_the_error_policy_by_name(routing_state):
    """PyRoute calls the kernel with the operator's keyword-only arguments as
    keywords (alpha of add.Tensor), and hands the error policy the caller's
    flagos arguments as (args, kwargs)."""
    seen = []

    def add(a, b, *, alpha=1):
        seen.append((a.device.type, b.device.type, alpha))
        if alpha == 3:
            raise ValueError("no alpha 3 here")
        return torch.add(a, b, alpha=alpha)

    def on_error(exc, dtype, args, kwargs):
        seen.append((type(exc).__name__, [t.device.type for t in args], kwargs))
        return torch.zeros(2, device="flagos")

    route = bare_route("add.Tensor", add, on_error)
    x = torch.ones(2, device="flagos")
    try:
        assert torch.equal(torch.add(x, x, alpha=2).cpu(), torch.full((2,), 3.0))
        assert torch.equal(torch.add(x, x, alpha=3).cpu(), torch.zeros(2))
    finally:
        route.set_native()
    native = torch_fl.backing()
    assert seen == [
        (native, native, 2),
        (native, native, 3),
        ("ValueError", ["flagos", "flagos"], {"alpha": 3}),
    ]


@pytest.fixture
def routed_to_kernel(routing_state):
    """routed(op, kernel): aten::op on flagos runs `kernel` through a bare PyRoute until the test ends."""
    routes = []

    def routed(op, kernel):
        routes.append(bare_route(op, kernel))

    yield routed
    for route in routes:
        route.set_native()


# neg has a typed front (typed_ops.h), erf goes through the boxed kernel.
@pytest.mark.parametrize("op,fn", [("neg", torch.neg), ("erf", torch.erf)])
def test_a_python_kernel_gets_the_same_alias_object_for_the_same_geometry(routed_to_kernel, op, fn):
    """Recycled aliases keep their Python object (the pool's Python hooks, csrc/python/alias_objects.cpp): a
    kernel called twice on tensors of one geometry is handed one object, each
    time over the bytes of that call's own argument."""
    seen = []

    def kernel(x):
        seen.append((weakref.ref(x), x.cpu().tolist()))  # a weak reference does not keep x from the pool
        return fn(x)

    routed_to_kernel(op, kernel)
    a, b = torch.tensor([1.0, 2.0], device="flagos"), torch.tensor([3.0, 4.0], device="flagos")
    for t in (a, b, a):
        torch.testing.assert_close(fn(t).cpu(), fn(t.cpu()))  # erf on CUDA and on the CPU differ in the last bit
    assert [values for _, values in seen] == [[1.0, 2.0], [3.0, 4.0], [1.0, 2.0]]
    pooled = seen[0][0]()
    assert pooled is not None and pooled is seen[1][0]() is seen[2][0]()
    # Between calls it is reachable from Python (gc.get_objects()), so it views nothing.
    # (Not untyped_storage(): a storage object made for it keeps it from the pool.)
    assert pooled.numel() == 0 and pooled.data_ptr() == 0


@pytest.mark.parametrize("op,fn", [("neg", torch.neg), ("erf", torch.erf)])
def test_a_pooled_alias_waits_out_of_pythons_reach_and_keeps_its_geometry(routed_to_kernel, op, fn):
    """Between calls a recycled alias's Python object is off the garbage
    collector's lists (nothing in Python can reach it, so it may keep its
    geometry and a pointer that is stale by then); the kernel gets it back
    tracked, over its own call's bytes."""
    seen = []

    def kernel(x):
        seen.append((id(x), gc.is_tracked(x), x.shape, x.cpu().tolist()))  # no reference kept
        return fn(x)

    routed_to_kernel(op, kernel)
    a, b = torch.tensor([1.0, 2.0], device="flagos"), torch.tensor([3.0, 4.0], device="flagos")
    for t in (a, b):
        torch.testing.assert_close(fn(t).cpu(), fn(t.cpu()))
    assert seen[0][0] == seen[1][0]  # one recycled object
    assert all(tracked for _, tracked, _, _ in seen)
    assert [values for *_, values in seen] == [[1.0, 2.0], [3.0, 4.0]]
    pooled = seen[1][0]
    assert all(id(o) != pooled for o in gc.get_objects())


@pytest.mark.parametrize("op,fn", [("neg", torch.neg), ("erf", torch.erf)])
def test_an_argument_the_kernel_keeps_is_not_recycled(routed_to_kernel, op, fn):
    """A kernel that keeps its argument, or a view of it, keeps what it was
    given: the next call gets another alias, and the kept one still views the
    first call's tensor."""
    kept = []

    def kernel(x):
        kept.append((x, x.view(-1)[:1]))
        return fn(x)

    routed_to_kernel(op, kernel)
    a, b = torch.tensor([1.0, 2.0], device="flagos"), torch.tensor([3.0, 4.0], device="flagos")
    fn(a)
    fn(b)
    assert kept[0][0] is not kept[1][0]
    assert kept[0][0].cpu().tolist() == [1.0, 2.0] and kept[0][1].cpu().tolist() == [1.0]
    assert kept[1][0].cpu().tolist() == [3.0, 4.0]
    a.add_(10)  # the kept alias is a view of the caller's tensor, not a copy
    assert kept[0][0].cpu().tolist() == [11.0, 12.0]


def test_a_typed_front_in_place_call_returns_the_callers_tensor_and_counts(routed_to_kernel):
    """add_ through the typed front: the kernel writes the alias (alpha given
    by keyword), and the caller gets its own tensor back."""

    def add_(x, y, *, alpha=1):
        return x.add_(y, alpha=alpha)

    routed_to_kernel("add_.Tensor", add_)
    x, y = torch.ones(3, device="flagos"), torch.full((3,), 2.0, device="flagos")
    out = x.add_(y, alpha=3)
    assert out is x and x.cpu().tolist() == [7.0, 7.0, 7.0]


# sub.Tensor has a typed front, floor_divide goes through the boxed kernel.
@pytest.mark.parametrize("op,expr", [("sub.Tensor", lambda x: x - 1), ("floor_divide", lambda x: x // 2)])
def test_a_scalar_operand_reaches_the_kernel_as_the_python_number(routed_to_kernel, op, expr):
    """x - 1 passes the 1 as a wrapped-number tensor; a Python kernel gets the
    number (as FlagGems expects: its kernels take Python scalars), through
    the typed front as through the boxed kernel."""
    seen = []
    aten = getattr(torch.ops.aten, op.split(".")[0])

    def kernel(x, other, **kwargs):
        seen.append(type(other))
        return aten(x, other, **kwargs)

    routed_to_kernel(op, kernel)
    x = torch.arange(4.0, device="flagos")
    assert torch.equal(expr(x).cpu(), expr(torch.arange(4.0)))
    assert seen == [int]


@pytest.mark.parametrize("op,call", [("add.Tensor", lambda x, y: x + y), ("atan2", torch.atan2)])
def test_a_result_that_is_a_foreign_argument_stays_that_tensor(routed_to_kernel, op, call):
    """A kernel that returns a non-flagos tensor the caller passed in (a CPU scalar: the only foreign tensor a
    call may mix in, as on CUDA) returns the caller's own tensor, not a flagos tensor over its memory, through
    the typed front (add) as through the boxed kernel (atan2)."""
    routed_to_kernel(op, lambda x, y, **kwargs: y)
    x, y = torch.ones(2, device="flagos"), torch.tensor(5.0)
    r = call(x, y)
    assert r.device.type == "cpu" and r.data_ptr() == y.data_ptr()
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        call(x, torch.full((2,), 5.0))  # a non-scalar CPU tensor: the device mismatch CUDA raises


# mm.out, bmm.out, addmm.out and baddbmm.out have typed fronts (what compiled graphs call): an out= operator
# returns its out argument, the caller's tensor, as the boxed kernel does.
@pytest.mark.parametrize("op", ["mm.out", "bmm.out", "addmm.out", "baddbmm.out"])
def test_an_out_operator_returns_its_out_tensor_on_python_and_native_routes(routed_to_kernel, op):
    if op.startswith("b"):
        a, b, bias = torch.randn(2, 3, 4), torch.randn(2, 4, 5), torch.randn(2, 3, 5)
    else:
        a, b, bias = torch.randn(3, 4), torch.randn(4, 5), torch.randn(3, 5)
    name = op.removesuffix(".out")
    fn = getattr(torch, name)
    args = (a, b) if name in ("mm", "bmm") else (bias, a, b)
    expected = fn(*args)
    flagos_args = [t.to("flagos") for t in args]
    for route in ("native", "python"):
        seen = []
        if route == "python":

            def kernel(*xs, out, seen=seen, **scalars):  # addmm, baddbmm: beta, alpha
                seen.append(out.shape)
                return fn(*xs, out=out, **scalars)

            routed_to_kernel(op, kernel)
        for out in (torch.empty(expected.shape, device="flagos"), torch.empty(0, device="flagos")):
            returned = fn(*flagos_args, out=out)
            assert returned is out, route  # the caller's tensor, not an alias and not the first input
            assert out.shape == expected.shape  # an empty out is resized
            torch.testing.assert_close(out.cpu(), expected)
        assert len(seen) == (2 if route == "python" else 0)
