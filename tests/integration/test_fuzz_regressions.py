"""Differences between flagos and the CPU that the differential fuzzer (tests/fuzz/test_differential.py) found,
each reduced by hand to a few lines.

Each test says what the CPU does and asks flagos for the same. The ones that need a change in the C++ core
(torch_fl/csrc) are strict xfails until it is made: the fuzzer's list of known issues
(tests/fuzz/known.py, KNOWN) names each of them, so that it reports those differences as known instead
of failing; when a fix lands, the test passes, the strict xfail fails, and both entries go.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import run_python
from tests.unit.routing_fixtures import routing_state  # noqa: F401
from torch_fl import routing

pytestmark = [pytest.mark.anyplatform, pytest.mark.usefixtures("routing_state")]


def _arguments(device):
    return torch.arange(8, device=device), torch.tensor([0, 1, 2, 3, 0, 1, 2, 3], device=device)


# A written argument that is (all of) one of the inputs. PyTorch's kernels for these check at::assert_no_overlap,
# which rejects a full overlap too, not only a partial one (TensorIterator allows x.add_(x)); the route checks
# partial overlaps only (route/overlap_check.cpp), and on the host copies nothing overlaps any more: the CPU
# kernel writes its result silently.
OUTPUT_IS_INPUT = {
    "index_select out= its index": ("index_select.out", lambda x, i: torch.index_select(x, 0, i, out=i)),
    "index_select out= its input": ("index_select.out", lambda x, i: torch.index_select(x[:4], 0, i[:4], out=x[:4])),
    "cat out= its only input": ("cat.out", lambda x, i: torch.cat([x], out=x)),
    "cat out= a dtype view of its input": ("cat.out", lambda x, i: torch.cat([x], out=x.view(torch.float64))),
    "index_add_ from itself": ("index_add_", lambda x, i: x[:4].index_add_(0, i[:4], x[:4])),
    "index_copy_ from itself": ("index_copy_", lambda x, i: x[:4].index_copy_(0, i[:4], x[:4])),
    "masked_select out= its input": ("masked_select.out", lambda x, i: torch.masked_select(x, x > 2, out=x)),
    "take out= its index": ("take.out", lambda x, i: torch.take(x, i, out=i)),
    "scatter_ of itself": ("scatter_.src", lambda x, i: i.scatter_(0, i, i)),
}


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")  # masked_select's out=
@pytest.mark.parametrize("op, call", OUTPUT_IS_INPUT.values(), ids=OUTPUT_IS_INPUT.keys())
def test_cpu_fallback_rejects_an_output_that_is_an_input(op, call):
    x, i = _arguments("cpu")
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        call(x, i)
    routing.set_route(op, "cpu_fallback")
    x, i = _arguments("flagos")
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        call(x, i)
    # and nothing is written
    assert x.cpu().tolist() == list(range(8)) and i.cpu().tolist() == [0, 1, 2, 3, 0, 1, 2, 3]


def test_cpu_fallback_rejects_a_self_overlapping_output_first():
    # abs_ has no Bool kernel; the CPU rejects the expanded (self-overlapping) output before it looks for one
    def call(device):
        torch.zeros(1, dtype=torch.bool, device=device).expand(3).abs_()

    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        call("cpu")
    routing.set_route("abs_", "cpu_fallback")
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        call("flagos")


def _broadcast_and_transposed(device):
    a = torch.arange(4.0, device=device).expand(3, 4)  # stride (0, 1): says nothing about the layout
    b = torch.arange(12.0, device=device).reshape(4, 3).t()  # stride (1, 3): transposed
    return a, b


def _strided_with_size_one_dims(device):
    t = torch.arange(6.0, device=device).reshape(1, 3, 2).permute(2, 0, 1).transpose(1, -2)[::2]  # (1, 1, 3)
    return t, t


# TensorIterator gives a result the layout of its inputs, reading past broadcast (stride 0) and size-1
# dimensions. The host copies the fallback makes are dense (a broadcast input materialised, size-1 dimensions
# given strides of their own), so the CPU kernel lays its result out after the copies, not the inputs.
LAYOUTS = {"a broadcast and a transposed input": _broadcast_and_transposed, "size-1 dims": _strided_with_size_one_dims}


@pytest.mark.parametrize("inputs", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_cpu_fallback_result_layout_follows_the_inputs(inputs):
    want = torch.add(*inputs("cpu"))
    routing.set_route("add.Tensor", "cpu_fallback")
    got = torch.add(*inputs("flagos"))
    assert got.stride() == want.stride()
    # which a program sees: the layout a preserve_format copy keeps, whether view() can flatten it
    assert got.to(torch.float64).stride() == want.to(torch.float64).stride()


def _out_resized(device):
    a = torch.arange(30, dtype=torch.uint8, device=device).reshape(3, 2, 5).permute(0, 2, 1)  # dense, not contiguous
    b = torch.arange(10, dtype=torch.uint8, device=device).reshape(5, 2)
    out = torch.empty(0, dtype=torch.uint8, device=device)
    torch.add(a, b, out=out)
    return out


def test_cpu_fallback_resizes_out_as_the_kernel_does():
    want = _out_resized("cpu")
    assert want.stride() == (10, 1, 5)  # TensorIterator resizes an empty out= after its inputs' layout
    routing.set_route("add.out", "cpu_fallback")
    got = _out_resized("flagos")
    assert torch.equal(got.cpu(), want)
    assert got.stride() == want.stride()


LIKE = {
    "zeros_like": lambda x, d: torch.zeros_like(x, device=d),
    "full_like with a dtype": lambda x, d: torch.full_like(x, 1, dtype=torch.int16, device=d),
    "empty_like": lambda x, d: torch.empty_like(x, device=d),
    "new_zeros": lambda x, d: x.new_zeros(3, device=d),
}  # (not new_tensor: its Python binding guards the input's device, so CUDA puts its result there too)


@pytest.mark.skipif(torch.flagos.device_count() < 2, reason="needs two flagos devices (FLAGOS_HOST_DEVICES=2)")
@pytest.mark.parametrize("make", LIKE.values(), ids=LIKE.keys())
def test_like_factories_without_an_index_use_the_current_device(make):
    # torch.device("flagos") is the current device, as torch.device("cuda") is: CUDA's *_like and new_* are
    # composite kernels and generated Python bindings, none with a device guard of the input's, so their
    # empty() allocates on the current device
    x = torch.ones(2, device="flagos:1")
    assert torch.flagos.current_device() == 0
    assert make(x, "flagos:0").device == torch.device("flagos", 0)  # an explicit index works
    assert make(x, "flagos").device == torch.device("flagos", 0)


# An operator that writes arguments and returns nothing (_foreach_add_, _fused_adam_, ...) has no
# ADInplaceOrView kernel: each route bumps the flagos tensors it writes (route/native_route.h); they used to
# run on native aliases whose own counters took the bumps, so autograd missed a saved tensor's change.
def _foreach_bumps_the_version(device, route):
    x = torch.ones(3, device=device)
    torch._foreach_mul_([x], 2.0)
    assert x._version == 1


def _foreach_change_to_a_saved_tensor_is_caught(device, route):
    w = torch.ones(3, device=device, requires_grad=True)
    x = torch.full((3,), 2.0, device=device)
    y = w * x  # saves x for w's gradient
    torch._foreach_mul_([x], 10.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()  # a silently wrong gradient (20, not 2) if the change goes unseen


def _foreach_after_inference_mode(device, route):
    # in a fresh process: the first alias of x's geometry is made under inference_mode, and the pool hands it
    # to the next call (an alias made as an inference tensor raised there)
    code = f"""
        import torch, torch_fl
        torch_fl.routing.set_route("_foreach_add_.Scalar", "{route}")
        x = torch.zeros(3, device="{device}")
        with torch.inference_mode():
            torch._foreach_add_([x], 1)
        torch._foreach_add_([x], 1)  # x is a normal tensor
        assert x.cpu().tolist() == [2.0, 2.0, 2.0] and x._version == 2, (x, x._version)
    """
    done = run_python(code)
    assert done.returncode == 0, done.stderr[-2000:]


def _foreach_on_an_inference_tensor(device, route):
    with torch.inference_mode():
        x = torch.zeros(3, device=device)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        torch._foreach_add_([x], 1)
    assert x.cpu().tolist() == [1.0, 1.0, 1.0]  # written, then refused, as on the CPU (CUDA bumps after its kernel)


FOREACH = {
    "version counter": _foreach_bumps_the_version,
    "a saved tensor changed": _foreach_change_to_a_saved_tensor_is_caught,
    "after inference mode": _foreach_after_inference_mode,
    "an inference tensor": _foreach_on_an_inference_tensor,
}


@pytest.mark.parametrize("route", ["native", "cpu_fallback"])
@pytest.mark.parametrize("case", FOREACH.values(), ids=FOREACH.keys())
def test_foreach_in_place_bumps_the_tensors_versions(case, route):
    case("cpu", route)
    with routing.route({"_foreach_mul_.Scalar": route, "_foreach_add_.Scalar": route}):
        case("flagos", route)


def test_a_typed_foreach_kernel_bumps_only_what_it_writes():
    # _foreach_add_.List has a typed native kernel (route/typed_ops.h): it writes self, not other
    xs = [torch.ones(2, device="flagos"), torch.ones(3, device="flagos")]
    ys = [torch.ones(2, device="flagos"), torch.ones(3, device="flagos")]
    torch._foreach_add_(xs, ys)
    assert [x._version for x in xs] == [1, 1]
    assert [y._version for y in ys] == [0, 0]


def test_cpu_fallback_puts_results_on_the_device_argument():
    x = torch.ones(2, 3, device="flagos")
    routing.set_route("ones_like", "cpu_fallback")
    y = torch.ones_like(x, device="cpu")
    assert y.device == torch.device("cpu") and torch.equal(y, torch.ones(2, 3))
    z = torch.ones_like(x)
    assert z.device == x.device
    if torch.flagos.device_count() > 1:
        routing.set_route("full_like", "cpu_fallback")
        assert torch.full_like(x.to("flagos:1"), 0, device="flagos:0").device == torch.device("flagos", 0)


def test_cpu_fallback_sees_a_tensor_passed_twice_as_one():
    # an empty out= that is also the input: the CPU kernel compares the two arguments' TensorImpls
    def call(device):
        t = torch.zeros(5, 0, device=device)
        torch.index_select(t, 1, torch.tensor([], dtype=torch.int64, device=device), out=t)

    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        call("cpu")
    routing.set_route("index_select.out", "cpu_fallback")
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        call("flagos")


# On the FlagGems route (GPU): in-place calls whose promoted result type cannot be written to `self` ran on
# FlagGems' kernels where CUDA raises; index_add_ of a dtype Triton has no atomic_add for failed to compile and
# raised where CUDA runs it (fuzzer seeds 12, 42 and 96 on the H200).
FLAGGEMS_CASES = {
    "int64 mul_ by a float tensor": (
        "mul_.Tensor",
        lambda d: torch.arange(3, device=d).mul_(torch.tensor(1.5, device=d)),
    ),
    "bool clamp_ to ints": ("clamp_", lambda d: torch.ones(3, dtype=torch.bool, device=d).clamp_(min=1, max=1)),
    "uint8 index_add_": (
        "index_add_",
        lambda d: torch.zeros(2, dtype=torch.uint8, device=d).index_add_(
            0, torch.tensor([0, 0, 1], device=d), torch.ones(3, dtype=torch.uint8, device=d)
        ),
    ),
}


@pytest.mark.flaggems
@pytest.mark.parametrize("case", sorted(FLAGGEMS_CASES))
def test_flaggems_in_place_calls_do_what_the_cpu_does(case):
    from torch_fl.backends import flaggems

    flaggems.LOADER.load()
    if flaggems.LOADER.reason:
        pytest.skip(flaggems.LOADER.reason)
    op, call = FLAGGEMS_CASES[case]
    try:
        want = call("cpu").tolist()
    except RuntimeError as e:
        want = str(e)
    routing.set_route(op, "flaggems")
    try:
        got = call("flagos").cpu().tolist()
    except RuntimeError as e:
        got = str(e)
    assert got == want
