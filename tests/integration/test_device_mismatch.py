"""One device per call, as CUDA requires: flagos:0 with flagos:1, or flagos with a CPU (or CUDA) tensor, raises
CUDA's RuntimeError on every backing and route; CPU scalars, copies and CPU indices mix as they do on CUDA."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

import torch_fl
from tests.conftest import NATIVE
from tests.unit.routing_fixtures import fake_gems, routing_state  # noqa: F401
from torch_fl import routing
from torch_fl.routing import registry

pytestmark = pytest.mark.anyplatform

MESSAGE = "Expected all tensors to be on the same device, but found at least two devices, {} and {}!"


def mismatch(first: str, second: str):
    return pytest.raises(RuntimeError, match=re.escape(MESSAGE.format(first, second)))


@pytest.fixture
def two():
    if torch.flagos.device_count() < 2:
        pytest.skip("needs two flagos devices (FLAGOS_HOST_DEVICES=2 on host backing)")
    return torch.ones(2, 2, device="flagos:0"), torch.ones(2, 2, device="flagos:1")


# What users saw succeed on host backing (the result on the first argument's device) and fail on CUDA.
TWO_DEVICE_CALLS = {
    "add": lambda a, b: a + b,
    "mul_": lambda a, b: a.mul_(b),
    "mm": lambda a, b: a @ b,
    "cat": lambda a, b: torch.cat([a, b]),
    "stack": lambda a, b: torch.stack([a, b]),
    "out=": lambda a, b: torch.add(a, a, out=b),
    "where": lambda a, b: torch.where(a > 0, a, b),
    "maximum (boxed route)": lambda a, b: torch.maximum(a, b),
    "addcmul (boxed route)": lambda a, b: torch.addcmul(a, a, b),
    "_foreach_add_": lambda a, b: torch._foreach_add_([a], [b]),
}


@pytest.mark.parametrize("call", TWO_DEVICE_CALLS.values(), ids=TWO_DEVICE_CALLS.keys())
def test_two_flagos_devices_raise_cudas_error(two, call):
    f0, f1 = two
    with mismatch("flagos:0", "flagos:1"):
        call(f0, f1)
    with mismatch("flagos:1", "flagos:0"):
        call(f1, f0)
    assert torch.equal(f0.cpu(), torch.ones(2, 2))  # nothing was written before the check


def test_the_error_is_a_plain_runtime_error_as_on_cuda(two):
    f0, f1 = two
    with pytest.raises(RuntimeError) as e:
        f0 + f1
    assert type(e.value) is RuntimeError
    assert "aten::add.Tensor" in str(e.value) and '.to("flagos:0")' in str(e.value)


@pytest.mark.parametrize("call", TWO_DEVICE_CALLS.values(), ids=TWO_DEVICE_CALLS.keys())
def test_flagos_with_a_cpu_tensor_raises(call):
    f = torch.ones(2, 2, device="flagos")
    c = torch.ones(2, 2)
    with mismatch("flagos:0", "cpu"):
        call(f, c)


def test_devices_are_named_in_cudas_order():
    f = torch.ones(3, device="flagos")
    c = torch.ones(3)
    with mismatch("flagos:0", "cpu"):
        c + f  # TensorIterator (no wrapper check) names the first non-CPU device first: CUDA's "cuda:0 and cpu!"
    with mismatch("cpu", "flagos:0"):
        torch.cat([c, f])  # a wrapper that checks every device names the first argument's device first
    with mismatch("cpu", "flagos:0"):
        torch.mm(c.view(1, 3), f.view(3, 1))


def test_cpu_scalars_mix_as_on_cuda(two):
    f0, f1 = two
    s = torch.tensor(2.0)
    for r, device in ((f0 + s, "flagos:0"), (s * f1, "flagos:1"), (f1 * 3, "flagos:1"), (2 - f1, "flagos:1")):
        assert r.device == torch.device(device)
    torch.testing.assert_close((s * f1).cpu(), torch.full((2, 2), 2.0))
    torch.testing.assert_close(torch.where(f1 > 0, f1, torch.tensor(0.0)).cpu(), torch.ones(2, 2))
    f1.masked_fill_(f1 > 5, torch.tensor(7.0))
    torch.testing.assert_close(torch.lerp(f1, f1 * 3, torch.tensor(0.5)).cpu(), torch.full((2, 2), 2.0))
    # one CPU scalar and a number beside an input on the device, into an out= on it
    out = torch.empty(2, 2, device="flagos:1")
    assert torch.add(f1, 2, alpha=torch.tensor(3.0).item(), out=out) is out
    assert torch.add(f1, s, alpha=2, out=out) is out and out.cpu().eq(5.0).all()


# Operators whose CUDA kernels check every tensor's device (no `device_check: NoCheck` in PyTorch's
# native_functions.yaml), given a 0-dim CPU tensor that is not a wrapped number: CUDA raises, and host memory's
# CPU kernels took it (and users' code then failed on a GPU).
CPU_SCALAR_REFUSED = {
    "index_select": lambda f: f.index_select(0, torch.tensor(1)),
    "gather": lambda f: f.flatten().gather(0, torch.tensor(1)),
    "cross_entropy (nll_loss_forward)": lambda f: torch.nn.functional.cross_entropy(f[0], torch.tensor(1)),
    "clamp.Tensor": lambda f: torch.clamp(f, min=torch.tensor(0.0)),
    "take": lambda f: f.take(torch.tensor(0)),
    # TensorIterator takes a CPU scalar as an input, never as the self it writes
    "cpu scalar += flagos": lambda f: torch.tensor(0.0).add_(f.sum()),
}


@pytest.mark.parametrize("call", CPU_SCALAR_REFUSED.values(), ids=CPU_SCALAR_REFUSED.keys())
def test_a_cpu_scalar_is_refused_where_cudas_kernel_checks_its_device(call):
    f = torch.ones(2, 2, device="flagos")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        call(f)


def test_an_out_call_of_cpu_scalars_alone_runs_where_the_kernel_reads_them_on_the_host():
    # linspace's out= reads start and end on the host
    c = torch.tensor(5.0)
    line = torch.zeros(3, device="flagos")
    assert torch.linspace(-c, c, 3, out=line) is line and line.cpu().tolist() == [-5.0, 0.0, 5.0]


@pytest.fixture
def checked_ops():
    """Sets flagos's device-check entries for the test, then restores import's."""
    from torch_fl.vocab import device_checks

    yield torch_fl._C._set_checked_ops
    torch_fl._C._set_checked_ops(device_checks.checked_ops() + device_checks.measured_entries())


def test_an_entry_naming_arguments_refuses_a_cpu_scalar_in_those_only(checked_ops):
    # masked_fill's CUDA kernel takes a CPU scalar as the value: an entry naming `value` refuses it there only.
    f = torch.zeros(3, device="flagos")
    mask, value = torch.tensor(True, device="flagos"), torch.tensor(2.0)
    checked_ops([])
    assert f.masked_fill(mask, value).cpu().tolist() == [2.0, 2.0, 2.0]
    checked_ops(["masked_fill.Tensor:value"])
    with pytest.raises(RuntimeError, match=r"flagos:0 and cpu! \(in aten::masked_fill"):
        f.masked_fill(mask, value)
    assert f.masked_fill(mask, 1.0).cpu().tolist() == [1.0, 1.0, 1.0]  # masked_fill.Scalar: no entry


# Kernels that check some arguments' devices themselves, measured on a GPU (torch_fl/vocab/cpu_scalar_checks.py):
# the CPU scalar is refused there and taken elsewhere, as on CUDA.
CPU_SCALAR_BY_ARGUMENT = {
    "masked_fill mask": (lambda f, c: f.masked_fill(c > 0, 1.0), lambda f, c: f.masked_fill(f > 0, c)),
    "logical_and self": (lambda f, c: torch.logical_and(c, f), lambda f, c: torch.logical_and(f, c)),
    "addcdiv (addcmul takes it)": (lambda f, c: f.addcdiv(f, c), lambda f, c: f.addcmul(f, c)),
    "embedding indices": (
        lambda f, c: torch.nn.functional.embedding(c.long(), f),
        lambda f, c: torch.nn.functional.embedding(c.long().to(f.device), f),
    ),
}


@pytest.mark.parametrize("calls", CPU_SCALAR_BY_ARGUMENT.values(), ids=CPU_SCALAR_BY_ARGUMENT.keys())
def test_a_cpu_scalar_is_refused_in_the_arguments_a_kernel_checks_itself(calls):
    refused, taken = calls
    f, c = torch.ones(2, 2, device="flagos"), torch.tensor(1.0)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        refused(f, c)
    assert taken(f, c).device == f.device


def test_the_measured_arguments_name_real_schema_arguments():
    from torch_fl.vocab.cpu_scalar_checks import REFUSED

    for op, args in REFUSED.items():
        name, _, overload = op.partition(".")
        schema = getattr(getattr(torch.ops.aten, name), overload or "default")._schema
        assert set(args) <= {a.name for a in schema.arguments}, (op, args)


# What an operator writes (out=, the self of an in-place operator) is on the device it computes on: TensorIterator
# takes a 0-dim CPU tensor as an input only, and CUDA raises for one as an output. flagos wrote into the CPU tensor.
def _scalar(f):
    return f.sum()  # a 0-dim flagos tensor


CPU_OUTPUT_REFUSED = {
    "exp.out 0-dim (boxed route)": lambda f, c: torch.exp(_scalar(f), out=c),
    "maximum.out 0-dim (boxed route)": lambda f, c: torch.maximum(_scalar(f), _scalar(f), out=c),
    "mul.out 0-dim": lambda f, c: torch.mul(_scalar(f), 2, out=c),
    "add_ 0-dim (typed route)": lambda f, c: c.add_(_scalar(f)),
    "mul_ 0-dim (typed route)": lambda f, c: c.mul_(_scalar(f)),
    "mm.out 0-dim (typed route)": lambda f, c: torch.mm(f, f, out=c),
    "index.Tensor_out 0-dim (CPU indices mix)": lambda f, c: torch.ops.aten.index.Tensor_out(
        f.flatten(), [torch.tensor(0)], out=c
    ),
    "exp.out 1-dim": lambda f, c: torch.exp(f.flatten(), out=c.expand(4).contiguous()),
}


@pytest.mark.parametrize("call", CPU_OUTPUT_REFUSED.values(), ids=CPU_OUTPUT_REFUSED.keys())
def test_a_cpu_tensor_is_refused_as_what_an_operator_writes(call):
    f = torch.ones(2, 2, device="flagos")
    c = torch.tensor(5.0)
    with pytest.raises(RuntimeError, match=r"flagos:0 and cpu! \(in aten::.* it writes its argument '(out|self)'"):
        call(f, c)
    assert c.item() == 5.0  # nothing was written
    # as an input beside a flagos tensor, the same CPU scalar mixes
    out = torch.empty((), device="flagos")
    assert torch.mul(_scalar(f), c, out=out).device == out.device and out.cpu().item() == 20.0


# TensorIterator computes on its output's device when no input is on one, and takes a CPU scalar only beside an
# input on that device (at most one): CUDA raises for `torch.exp(torch.tensor(5.), out=cuda_tensor)`.
CPU_INPUTS_ONLY = {
    "exp.out": lambda c, out: torch.exp(c, out=out),
    "sin.out": lambda c, out: torch.sin(c, out=out),
    "div.out (two CPU scalars)": lambda c, out: torch.div(c, c, out=out),
    "clamp.Tensor_out": lambda c, out: torch.clamp(c, min=c, max=c, out=out),
    # a Python number is a CPU scalar too (a wrapped number): CUDA counts it, "too many CPU scalars"
    "add.out (a CPU scalar and a number)": lambda c, out: torch.add(c, 2, out=out),
    "mul.out (a CPU scalar and a number)": lambda c, out: torch.mul(c, 2.5, out=out),
    # TensorIterator operators native_functions.yaml does not mark structured (measured, cpu_scalar_checks.py)
    "abs.out": lambda c, out: torch.abs(c, out=out),
    "logical_not.out": lambda c, out: torch.logical_not(c, out=out),
    "where.self_out": lambda c, out: torch.where(c > 0, c, -c, out=out),
}


@pytest.mark.parametrize("call", CPU_INPUTS_ONLY.values(), ids=CPU_INPUTS_ONLY.keys())
def test_an_out_call_whose_inputs_are_all_cpu_scalars_is_refused(call):
    c = torch.tensor(5.0)
    out = torch.zeros((), device="flagos")
    with pytest.raises(RuntimeError, match=r"flagos:0 and cpu! \(in aten::.* its inputs are all on cpu"):
        call(c, out)
    assert out.cpu().item() == 0.0  # nothing was written
    assert call(c.to("flagos"), out) is out  # the way out the message names


@pytest.mark.usefixtures("routing_state")
def test_the_cpu_fallback_route_refuses_a_cpu_output_too():
    f = torch.ones(2, device="flagos")
    c = torch.tensor(5.0)
    with routing.route({"exp.out": "cpu_fallback"}):
        with pytest.raises(
            RuntimeError, match=r"flagos:0 and cpu! \(in aten::exp\.out on flagos: it writes its argument 'out'"
        ):
            torch.exp(f.sum(), out=c)
    assert c.item() == 5.0


@pytest.mark.parametrize(
    "op,call",
    [
        ("mul_.Tensor", lambda f, c: c.mul_(f.sum())),  # PyRoute's typed front
        ("abs.out", lambda f, c: torch.abs(f.sum(), out=c)),  # its boxed kernel
    ],
)
def test_a_python_route_refuses_a_cpu_output_too(fake_gems, op, call):  # noqa: F811
    routing.set_route(op, "flaggems")
    f = torch.ones(2, device="flagos")
    c = torch.tensor(5.0)
    with pytest.raises(RuntimeError, match="flagos:0 and cpu! .* it writes its argument"):
        call(f, c)
    assert c.item() == 5.0 and fake_gems.calls == []  # the backend never saw the call


@pytest.mark.parametrize("name", ["_foreach_addcdiv_", "_foreach_addcmul_", "_foreach_addcdiv", "_foreach_addcmul"])
def test_foreach_scalars_on_flagos_are_refused_as_on_cuda(name):
    # CUDA reads the `scalars` tensor on the host: "Expected scalars to be on CPU, got cuda:0 instead."
    xs = [torch.ones(2, device="flagos") for _ in range(2)]
    with pytest.raises(RuntimeError, match=r"Expected scalars to be on CPU, got flagos:0 instead\..*scalars\.cpu\(\)"):
        getattr(torch, name)(xs, xs, xs, torch.tensor([1.0, 2.0], device="flagos"))
    assert [t.cpu().tolist() for t in xs] == [[1.0, 1.0], [1.0, 1.0]]
    # the CPU `scalars` are the only CPU tensor such a call takes: the lists are checked as any call's
    with mismatch("flagos:0", "cpu"):
        getattr(torch, name)(xs, [torch.ones(2), xs[1]], xs, torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize("name", ["_foreach_addcdiv_", "_foreach_addcmul"])
def test_foreach_scalars_are_a_cpu_tensor_as_on_cuda(name):
    # CUDA reads a _foreach addcdiv/addcmul's `scalars` on the host: a CPU tensor of one value per tensor.
    xs = [torch.ones(2, device="flagos") for _ in range(2)]
    scalars = torch.tensor([1.0, 2.0])
    out = getattr(torch, name)(xs, xs, xs, scalars)
    got = xs if name.endswith("_") else out
    assert [t.cpu().tolist() for t in got] == [[2.0, 2.0], [3.0, 3.0]]


def test_the_operators_cuda_checks_come_from_pytorchs_own_table():
    from torch_fl.vocab import device_checks

    checked = set(device_checks.checked_ops())
    assert {"index_select", "gather", "nll_loss_forward", "clamp.Tensor", "take"} <= checked
    # TensorIterator's operators and the copies take CPU scalars
    assert not {"add.Tensor", "add_.Tensor", "mul.Tensor", "where.self", "lerp.Tensor", "copy_"} & checked


def test_copies_cross_devices(two):
    f0, f1 = two
    f1.copy_(torch.arange(4.0).view(2, 2))
    f0.copy_(f1)
    assert f0.cpu().tolist() == [[0.0, 1.0], [2.0, 3.0]]
    c = torch.empty(2, 2)
    c.copy_(f1)
    assert c.tolist() == [[0.0, 1.0], [2.0, 3.0]]
    moved = f0.to("flagos:1")
    assert moved.device == torch.device("flagos:1") and moved.cpu().tolist() == c.tolist()
    assert torch.ones(2).to("flagos:1").device == torch.device("flagos:1")
    assert f1.to("cpu", torch.float64).dtype == torch.float64
    torch._foreach_copy_([f0], [c])


def test_cpu_indices_as_on_cuda(two):
    f0, f1 = two
    x = torch.arange(6.0, device="flagos:1")
    idx = torch.tensor([0, 2])
    assert x[idx].cpu().tolist() == [0.0, 2.0] and x[idx].device == torch.device("flagos:1")
    assert x[torch.tensor([True, False] * 3)].cpu().tolist() == [0.0, 2.0, 4.0]
    x[idx] = torch.tensor([10.0, 20.0], device="flagos:1")
    x.index_put_((idx,), torch.tensor(5.0), accumulate=True)
    assert x.cpu().tolist() == [15.0, 1.0, 25.0, 3.0, 4.0, 5.0]
    # indices on another flagos device are not a CPU tensor: CUDA's index raises too
    with mismatch("flagos:1", "flagos:0"):
        x[idx.to("flagos:0")]
    # the indexed tensor and the values are still checked
    with mismatch("flagos:1", "flagos:0"):
        x.index_put_((idx.to("flagos:1"),), torch.ones(2, device="flagos:0"))


# The indexing operators take CPU indices (the elements of their Tensor?[] argument) on CUDA, each as CUDA does:
# index checks them (check_indices_on_cpu_or_selfdevice), _index_put_impl_ moves them to the device, and the rest
# call those two. Each call: (x, CPU indices on x's device's dimension 1) -> what x became or the result.
def _values(x):
    return torch.full((3, 2), 10.0, device=x.device)


def _mask(x):
    return torch.tensor([[True], [False], [True]], device=x.device)


CPU_INDEX_CALLS = {
    "index.Tensor": lambda x, i: torch.ops.aten.index.Tensor(x, [None, i]),
    "index.Tensor_out": lambda x, i: torch.ops.aten.index.Tensor_out(x, [None, i], out=torch.empty(0, device=x.device)),
    "_unsafe_index": lambda x, i: torch.ops.aten._unsafe_index.Tensor(x, [None, i]),
    "_unsafe_masked_index": lambda x, i: torch.ops.aten._unsafe_masked_index(x, _mask(x), [None, i], -1.0),
    "index_put": lambda x, i: torch.ops.aten.index_put(x, [None, i], _values(x)),
    "index_put accumulate": lambda x, i: torch.ops.aten.index_put(x, [None, i], _values(x), True),
    "index_put_": lambda x, i: torch.ops.aten.index_put_(x, [None, i], _values(x)),
    "index_put_ accumulate": lambda x, i: torch.ops.aten.index_put_(x, [None, i], _values(x), True),
    "index_put_ 0-dim CPU value": lambda x, i: x.index_put_((i,), torch.tensor(7.0), accumulate=True),
    "_index_put_impl_": lambda x, i: torch.ops.aten._index_put_impl_(x, [None, i], _values(x), True),
    "_unsafe_index_put": lambda x, i: torch.ops.aten._unsafe_index_put(x, [None, i], _values(x), True),
    "_unsafe_masked_index_put_accumulate": lambda x, i: torch.ops.aten._unsafe_masked_index_put_accumulate(
        x, _mask(x), [None, i], _values(x)
    ),
    "x[:, i] = v": lambda x, i: x.__setitem__((slice(None), i), _values(x)) or x,
}


@pytest.mark.parametrize("call", CPU_INDEX_CALLS.values(), ids=CPU_INDEX_CALLS.keys())
def test_indexing_operators_take_cpu_indices_as_on_cuda(call):
    # _unsafe_index and the masked forms raised the device-mismatch error on flagos
    last = f"flagos:{torch.flagos.device_count() - 1}"
    x = torch.arange(12.0, device=last).view(3, 4)
    want_x = torch.arange(12.0, device=NATIVE).view(3, 4)
    i = torch.tensor([0, 2])
    want = call(want_x, i)
    got = call(x, i)
    assert got.device == torch.device(last)
    torch.testing.assert_close(got.cpu(), want.cpu())
    torch.testing.assert_close(x.cpu(), want_x.cpu())  # what the in-place forms wrote


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_values_are_not_indices(accumulate):
    # CUDA moves CPU indices, not CPU values: a 1-dim CPU value tensor fails there (TensorIterator's device check,
    # or accumulate's "expected device cuda:0 but got device cpu for value tensor"), and so on flagos
    x = torch.zeros(4, device="flagos")
    with mismatch("flagos:0", "cpu"):
        x.index_put_((torch.tensor([0, 2]),), torch.ones(2), accumulate=accumulate)
    with mismatch("flagos:0", "cpu"):
        torch.ops.aten._unsafe_masked_index(x, torch.tensor([True, False] * 2), [torch.tensor([0, 1, 2, 3])], 0.0)
    assert x.cpu().tolist() == [0.0] * 4


def test_pack_padded_sequence_takes_cpu_lengths():
    seq = torch.randn(3, 2, 4, device="flagos")
    data, batch_sizes = torch.ops.aten._pack_padded_sequence(seq, torch.tensor([3, 2]), False)
    assert data.device.type == "flagos" and batch_sizes.device.type == "cpu" and batch_sizes.tolist() == [2, 2, 1]


@pytest.mark.usefixtures("routing_state")
def test_the_cpu_fallback_route_checks_too(two):
    f0, f1 = two
    with routing.route({"add.Tensor": "cpu_fallback", "maximum": "cpu_fallback"}):
        with mismatch("flagos:0", "flagos:1"):
            f0 + f1
        with mismatch("flagos:1", "cpu"):
            torch.maximum(f1, torch.ones(2, 2))
        r = f1 + torch.tensor(1.0)
        assert r.device == torch.device("flagos:1") and r.cpu().eq(2).all()
        # the caller's mistake is not the route's failure: the operator stays on its route
        torch.maximum(f1, f1)
        stat = next(s for s in routing.stats() if s.op == "maximum" and s.backend == "cpu_fallback")
        assert stat.failures == 0 and stat.fallbacks == 0


@pytest.mark.usefixtures("fake_gems")
@pytest.mark.parametrize("op,call", [("add.Tensor", lambda a, b: a + b), ("cat", lambda a, b: torch.cat([a, b]))])
def test_a_python_route_checks_too(two, op, call):
    # add.Tensor runs through PyRoute's typed front, cat through its boxed kernel
    f0, f1 = two
    routing.set_route(op, "flaggems")
    assert isinstance(registry.REGISTERED[op].handle, torch_fl._C.PyRoute)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback, no demotion: the call never reaches the backend
        with mismatch("flagos:0", "flagos:1"):
            call(f0, f1)
    assert op not in routing.state.STATE.failed


# ------------------------------------------------------------- CUDA backing
# There flagos:i is cuda:i underneath, and CUDA's kernels would see two cuda:0 tensors where a flagos tensor meets
# a CUDA one: the route raises first, naming the flagos device, as it does for CPU tensors on every backing.


@pytest.mark.cuda
def test_flagos_with_a_cuda_tensor_raises_on_a_cuda_backing():
    f = torch.ones(2, 2, device="flagos")
    g = torch.ones(2, 2, device="cuda")
    with mismatch("flagos:0", "cuda:0"):
        f + g
    with mismatch("cuda:0", "flagos:0"):
        g + f
    with mismatch("flagos:0", "cuda:0"):
        f @ g
    with mismatch("flagos:0", "cuda:0"):
        f[torch.tensor([0], device="cuda")]  # CUDA indices are not CPU indices
    with mismatch("flagos:0", "cpu"):
        f + torch.ones(2, 2)


@pytest.mark.cuda
def test_copies_between_flagos_and_cuda_on_a_cuda_backing():
    f = torch.arange(4.0, device="flagos")
    g = torch.empty(4, device="cuda")
    g.copy_(f)
    f.copy_(g * 2)
    assert f.cpu().tolist() == [0.0, 2.0, 4.0, 6.0] and g.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert (f + torch.tensor(1.0, device="cpu")).device.type == "flagos"
