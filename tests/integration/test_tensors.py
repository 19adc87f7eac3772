"""Tensor semantics on flagos: real storage, views, in-place, out=, copies."""

from __future__ import annotations

import pytest
import torch

import torch_fl
from tests.conftest import NATIVE

pytestmark = pytest.mark.anyplatform


def test_storage_is_real_and_views_share_it():
    x = torch.arange(12.0, device="flagos")
    assert x.data_ptr() != 0
    v = x.view(3, 4)
    t = v.t()
    s = x[2:8:2]
    for view in (v, t, s, x.unfold(0, 4, 2), x.as_strided((2, 2), (1, 3), 1)):
        assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert view._base is x or view._base is None or view._base._base is x
    assert s.data_ptr() == x.data_ptr() + 2 * x.element_size()
    t[1, 0] = 100.0  # writes through the view land in the base
    assert x[1].item() == 100.0
    s.mul_(0)
    assert x.cpu()[2:8:2].eq(0).all()


def test_in_place_returns_the_same_tensor():
    x = torch.ones(4, device="flagos")
    y = x.add_(1)
    assert y is x
    out = torch.empty(4, device="flagos")
    r = torch.mul(x, 3, out=out)
    assert r is out and out.cpu().eq(6).all()


def test_out_argument_is_resized_on_flagos():
    a = torch.randn(3, 5, device="flagos")
    out = torch.empty(0, device="flagos")
    ptr = out.data_ptr()
    torch.matmul(a, a.t(), out=out)
    assert out.shape == (3, 3) and out.device.type == "flagos"
    assert out.data_ptr() != ptr
    torch.testing.assert_close(out.cpu(), a.cpu() @ a.cpu().t())
    # values/indices out= pairs
    vals, idx = torch.empty(0, device="flagos"), torch.empty(0, dtype=torch.long, device="flagos")
    torch.max(a, dim=1, out=(vals, idx))
    assert vals.shape == (3,) and idx.shape == (3,)
    torch.testing.assert_close(vals.cpu(), a.cpu().max(dim=1).values)


def test_resize_and_set():
    x = torch.arange(4.0, device="flagos")
    x.resize_(8)
    assert x.shape == (8,) and x[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    y = torch.empty(0, device="flagos")
    y.set_(x)
    assert y.data_ptr() == x.data_ptr() and y.shape == x.shape
    z = torch.empty(0, device="flagos")
    z.set_(x.untyped_storage(), 4, (2, 2), (2, 1))
    assert z.data_ptr() == x.data_ptr() + 4 * 4
    st = torch.UntypedStorage(16, device="flagos")
    st.resize_(64)
    assert st.nbytes() == 64 and st.device.type == "flagos"


def test_results_carry_the_dispatch_keys_of_a_flagos_tensor():
    """A kernel's result is retagged as flagos in place; its dispatch keys must be exactly those of a tensor
    allocated on flagos (autograd, autocast and the backend key), whatever the kernel and dtype, under
    inference mode, and for results that need grad."""
    keys = torch._C._dispatch_keys
    like = keys(torch.empty(2, device="flagos"))
    a = torch.randn(3, 4, device="flagos")
    w = torch.randn(4, 5, device="flagos", requires_grad=True)
    results = [a + a, a.mm(w.detach()), a.sum(1), (a > 0), a.to(torch.bfloat16), torch.cat([a, a])]
    for r in results:
        assert r.device.type == "flagos"
        assert keys(r) == like, (r.dtype, keys(r))
    y = a.mm(w)  # autograd records the result: same keys, and backward runs on them
    assert keys(y) == like
    y.sum().backward()
    assert w.grad is not None and keys(w.grad) == like
    with torch.inference_mode():
        like_inference = keys(torch.empty(2, device="flagos"))
        made = [a * 2, a.mm(w), a.sum(1), (a > 0), a.to(torch.bfloat16), torch.cat([a, a])]
        for r in made:
            assert r.is_inference() and r.device.type == "flagos"
            assert keys(r) == like_inference, (r.dtype, keys(r))
    host = a.cpu()
    expected = [
        host * 2,
        host.mm(w.detach().cpu()),
        host.sum(1),
        host > 0,
        host.to(torch.bfloat16),
        torch.cat([host, host]),
    ]
    for r, e in zip(made, expected, strict=True):
        torch.testing.assert_close(r.cpu(), e)


def test_zero_copy_aliases_both_ways():
    x = torch.arange(6.0, device="flagos").view(2, 3)
    n = torch_fl.as_native(x)
    assert n.device.type == NATIVE.type and n.data_ptr() == x.data_ptr()
    assert n.shape == x.shape and n.stride() == x.stride()
    n[0, 0] = 42.0
    assert x[0, 0].item() == 42.0
    back = torch_fl.as_flagos(n)
    assert back.device.type == "flagos" and back.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    native = torch.ones(3, device=NATIVE)
    f = torch_fl.as_flagos(native)
    f.add_(1)
    assert native.tolist() == [2.0, 2.0, 2.0]
    del native  # the alias keeps the memory alive
    assert f.cpu().tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(RuntimeError, match="as_native expects a flagos tensor"):
        torch_fl.as_native(torch.ones(1))


def test_copies_between_devices():
    n = torch.flagos.device_count()
    cpu = torch.randn(5, 7)
    f0 = cpu.to("flagos:0")
    f1 = f0.to(f"flagos:{n - 1}")
    assert f1.device == torch.device("flagos", n - 1)
    torch.testing.assert_close(f1.cpu(), cpu)
    nc = f0.t().contiguous().to(f"flagos:{n - 1}")  # non-contiguous source
    torch.testing.assert_close(nc.cpu(), cpu.t().contiguous())
    half = f0.to(torch.float16)
    assert half.dtype == torch.float16 and half.device.type == "flagos"


def test_pin_memory_and_non_blocking_copies():
    host = torch.randn(1024).pin_memory()
    assert host.is_pinned()
    dev = host.to("flagos", non_blocking=True)
    back = torch.empty(1024).pin_memory()
    back.copy_(dev, non_blocking=True)
    torch.flagos.synchronize()
    torch.testing.assert_close(back, host)
    assert not torch.randn(4).is_pinned()


def test_host_tensors_made_pinned_report_it():
    # PyTorch answers is_pinned() for the accelerator (flagos) only after its C++ lazy init: on a CUDA
    # backing pinned memory comes from CUDA's host allocator, and DDP's reducer asserts on the answer.
    torch.ones(1, device="flagos")
    pinned = torch.empty(16, pin_memory=True)
    assert pinned.is_pinned()
    assert torch.empty(16).pin_memory().is_pinned()
    assert not torch.empty(16).is_pinned()


def test_cpu_results_stay_on_cpu():
    x = torch.tensor([1.5, 2.5], device="flagos")
    assert x.tolist() == [1.5, 2.5]
    assert x.sum().item() == 4.0
    assert x.cpu().device.type == "cpu"
    assert x.cpu().numpy().tolist() == [1.5, 2.5]


def test_factories_and_scalars():
    n = torch.flagos.device_count()
    for t in (
        torch.zeros(3, device="flagos"),
        torch.arange(5, device=f"flagos:{n - 1}"),
        torch.full((2,), 7, device="flagos"),
        torch.eye(3, device="flagos"),
        torch.linspace(0, 1, 5, device="flagos"),
        torch.tensor(3.0, device="flagos"),
    ):
        assert t.device.type == "flagos"
    assert torch.arange(5, device=f"flagos:{n - 1}").device.index == n - 1
    assert torch.eye(3, device="flagos").sum().item() == 3.0
    with pytest.raises(RuntimeError, match="pin_memory=True applies to host tensors"):
        torch.empty(2, device="flagos", pin_memory=True)


def test_empty_and_zero_dim_tensors():
    e = torch.empty(0, 3, device="flagos")
    assert (e + 1).shape == (0, 3)
    s = torch.tensor(2.0, device="flagos")
    assert (s * s).item() == 4.0 and (s * s).dim() == 0


def test_mixed_cpu_scalar_tensor_arguments():
    x = torch.ones(3, device="flagos")
    y = x * torch.tensor(2.0)  # 0-d CPU tensors are allowed with device tensors, as for CUDA
    assert y.device.type == "flagos" and y.cpu().tolist() == [2.0, 2.0, 2.0]


def test_complex_and_conjugate_views():
    z = torch.randn(4, dtype=torch.complex64)
    fz = z.to("flagos")
    torch.testing.assert_close(fz.conj().cpu(), z.conj())
    torch.testing.assert_close(torch.view_as_real(fz).cpu(), torch.view_as_real(z))
    torch.testing.assert_close((fz.conj() * fz).cpu(), z.conj() * z)


def test_typed_native_kernels_handle_every_argument_and_result_kind():
    """The hottest ops have typed kernels (csrc/route/typed_native.cpp): lists, optional
    lists, tuples, vectors, bools, device arguments and in-place returns must
    behave as on the boxed route, i.e. as on the backing device."""
    last = torch.flagos.device_count() - 1
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    fa, fb = a.to("flagos"), b.to("flagos")
    # tensor lists (ITensorListRef) with a flagos device index taken from the inputs
    cat = torch.cat([fa.to(f"flagos:{last}"), fb.to(f"flagos:{last}")])
    assert cat.device == torch.device("flagos", last)
    torch.testing.assert_close(cat.cpu(), torch.cat([a, b]))
    # optional tensor lists (index.Tensor)
    idx = torch.tensor([2, 0])
    torch.testing.assert_close(fa[idx.to("flagos"), 1:].cpu(), a[idx, 1:])
    # tuples and bools
    logp = torch.log_softmax(fa, 1)
    target = torch.tensor([0, 3, 1])
    nll = torch.nn.functional.nll_loss
    torch.testing.assert_close(nll(logp, target.to("flagos")).cpu(), nll(a.log_softmax(1), target))
    y, mean, rstd = torch.native_layer_norm(fa, (4,), None, None, 1e-5)
    assert all(t.device.type == "flagos" for t in (y, mean, rstd))
    torch.testing.assert_close(y.cpu(), torch.native_layer_norm(a, (4,), None, None, 1e-5)[0])
    assert torch.equal(fa, a.to("flagos")) and not torch.equal(fa, fb)
    # in place: the caller's own tensor comes back; a dtype change between
    # calls reaches the recycled aliases
    c = fa.clone()
    assert c.add_(fb) is c and c.masked_fill_(c > 0, 0.0) is c
    torch.testing.assert_close(c.cpu(), (a + b).masked_fill(a + b > 0, 0.0))
    ints = torch.arange(6, device="flagos")
    assert (ints * 2).cpu().tolist() == [0, 2, 4, 6, 8, 10] and (ints * 2).dtype == torch.long
    cpu_dst = torch.empty(3, 4)
    assert cpu_dst.copy_(fa) is cpu_dst and torch.equal(cpu_dst, a)
    # void (in-place lists) and vector results (_foreach ops)
    params = [fa.clone(), fb.clone()]
    torch._foreach_add_(params, 1.0)
    torch.testing.assert_close([p.cpu() for p in params], [a + 1, b + 1])
    roots = torch._foreach_sqrt([fa.abs(), fb.abs()])
    assert all(r.device.type == "flagos" for r in roots)
    torch.testing.assert_close([r.cpu() for r in roots], [a.abs().sqrt(), b.abs().sqrt()])
    # device arguments: factories on a named device, copies to a native one
    assert torch.full((2,), 3.0, device=f"flagos:{last}").device.index == last
    assert torch.arange(1, 4, device=f"flagos:{last}").device.index == last
    assert fa.to("cpu", torch.float64).device.type == "cpu"


def test_typed_kernels_of_mixture_of_experts_and_sampling_behave_as_on_the_backing_device():
    """What a mixture-of-experts layer and sampling call (route/typed_ops.h) runs as on the backing device: several
    results, an optional bool, Scalar arguments and results, optional tensors, in-place index writes that return the
    caller's tensor and count as writes for autograd."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 8, generator=gen)
    f = logits.to("flagos")
    for got, want in [
        (torch.topk(f, 3), torch.topk(logits, 3)),
        (torch.sort(f, descending=True), torch.sort(logits, descending=True)),
        (torch.sort(f, stable=True), torch.sort(logits, stable=True)),
        (f.max(dim=-1), logits.max(dim=-1)),
    ]:
        assert all(g.device.type == "flagos" for g in got)
        assert all(torch.equal(g.cpu(), w) for g, w in zip(got, want, strict=True))
    experts = torch.topk(logits, 2).indices
    assert torch.equal(torch.gather(f, 1, experts.to("flagos")).cpu(), torch.gather(logits, 1, experts))
    mask = torch.zeros_like(logits).scatter(1, experts, 1.0)  # scatter.value
    assert torch.equal(torch.zeros_like(f).scatter(1, experts.to("flagos"), 1.0).cpu(), mask)
    src = torch.ones(6, 2)
    assert torch.equal(torch.zeros_like(f).scatter(1, experts.to("flagos"), src.to("flagos")).cpu(), mask)
    for cmp in (torch.lt, torch.le, torch.gt, torch.ge):
        assert torch.equal(cmp(f, f.flip(0)).cpu(), cmp(logits, logits.flip(0)))
    assert f[2, 3].item() == logits[2, 3].item() and f.argmax().item() == logits.argmax().item()
    # grouped matrix products of tokens sorted by expert, as transformers' MoE layers call them
    x, w = torch.randn(7, 16, generator=gen), torch.randn(3, 16, 8, generator=gen)
    offs = torch.tensor([2, 5, 7], dtype=torch.int32)
    got = torch._grouped_mm(x.to("flagos"), w.to("flagos"), offs=offs.to("flagos"))
    want = torch._grouped_mm(x.to(NATIVE), w.to(NATIVE), offs=offs.to(NATIVE))  # the backing's own kernel
    assert got.device.type == "flagos" and torch.equal(got.cpu(), want.cpu())
    # in place: the caller's tensor back, accumulated as on the backing device, and a write autograd sees
    out, rows = torch.zeros(4, 3, device="flagos"), torch.tensor([0, 2, 0])
    assert out.index_put_((rows.to("flagos"),), torch.ones(3, 3, device="flagos"), accumulate=True) is out
    assert out.cpu().tolist() == [[2.0] * 3, [0.0] * 3, [1.0] * 3, [0.0] * 3]
    leaf = torch.ones(3, device="flagos", requires_grad=True)
    y = leaf.sigmoid()  # sigmoid saves its result for sigmoid_backward
    y.index_put_((torch.tensor([1], device="flagos"),), torch.zeros(1, device="flagos"))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    z = leaf.sigmoid()
    z.sum().backward()
    torch.testing.assert_close(leaf.grad.cpu(), torch.ones(3).sigmoid() * (1 - torch.ones(3).sigmoid()))


# ------------------------------------------------- torch.use_deterministic_algorithms


@pytest.fixture
def deterministic():
    enabled, fill = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # the default, said here
    yield
    torch.use_deterministic_algorithms(enabled)
    torch.utils.deterministic.fill_uninitialized_memory = fill


# The ways new memory is made: flagos's own kernels (empty, empty_strided, resize_) and the native route's
# composites over the backing device's empty.
UNINITIALIZED = {
    "empty": lambda d, dtype: torch.empty(2, 3, dtype=dtype, device=d),
    "empty channels_last": lambda d, dtype: torch.empty(
        2, 3, 2, 2, dtype=dtype, device=d, memory_format=torch.channels_last
    ),
    "empty_strided": lambda d, dtype: torch.empty_strided((2, 3), (1, 2), dtype=dtype, device=d),
    "resize_ (the new elements)": lambda d, dtype: torch.zeros(2, dtype=dtype, device=d).resize_(2, 3),
    "empty_like": lambda d, dtype: torch.empty_like(torch.zeros(3, 2, dtype=dtype, device=d).t()),
    "new_empty": lambda d, dtype: torch.zeros(1, dtype=dtype, device=d).new_empty(4),
    "new_empty_strided": lambda d, dtype: torch.zeros(1, dtype=dtype, device=d).new_empty_strided((2, 2), (1, 2)),
    "empty_permuted": lambda d, dtype: torch.empty_permuted((2, 3), (1, 0), dtype=dtype, device=d),
}


DTYPES = [torch.float32, torch.bfloat16, torch.complex64, torch.int32, torch.uint8, torch.bool]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("way", UNINITIALIZED.values(), ids=UNINITIALIZED.keys())
def test_deterministic_algorithms_fill_new_memory_as_the_backing_device_does(deterministic, way, dtype):
    # NaN for floating and complex dtypes, the largest value for integers (True for bool); resize_ only the
    # elements it adds. flagos's empty, empty_strided and resize_ left theirs unfilled.
    want = way(NATIVE, dtype)
    got = way("flagos", dtype)
    assert got.device.type == "flagos" and got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want.cpu(), equal_nan=True, rtol=0, atol=0)


def test_without_deterministic_algorithms_resize_keeps_what_it_had(deterministic):
    torch.utils.deterministic.fill_uninitialized_memory = False
    x = torch.arange(4.0, device="flagos").resize_(2, 4)
    assert x[0].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


# --------------------------------------------------------------------- pinned memory


def test_pin_memory_of_a_flagos_tensor_raises_as_for_a_cuda_tensor():
    # PyTorch's own composites answer on flagos as on CUDA: only dense CPU tensors can be pinned. Run on the
    # host backing's CPU alias, pin_memory() returned a flagos tensor whose is_pinned() was True.
    x = torch.randn(4, device="flagos")
    assert x.is_pinned() is False
    with pytest.raises(RuntimeError, match=r"cannot pin 'flagosFloatType' only dense CPU tensors can be pinned"):
        x.pin_memory()
    with pytest.raises(RuntimeError, match="only dense CPU tensors can be pinned"):
        torch.ops.aten._pin_memory(x)
    if NATIVE.type == "cuda":
        native = torch.randn(4, device=NATIVE)
        assert native.is_pinned() is False
        # CUDA's type name in this message differs between torch releases ('CUDAFloatType', 'torch.cuda.FloatTensor')
        with pytest.raises(RuntimeError, match=r"cannot pin '[\w.]+' only dense CPU tensors can be pinned"):
            native.pin_memory()
    assert torch.randn(4).pin_memory().is_pinned()  # host tensors still pin for flagos


# ------------------------------------------------------------------- nested tensors

NESTED_REFUSED = r"nested tensors of the strided layout .* are not supported on flagos .*layout=torch\.jagged"


SIZES = torch.tensor([[2], [3]])  # a nested tensor's sizes, a CPU tensor on every device


def _parts(device="cpu"):
    return [torch.arange(2.0, device=device), torch.arange(3.0, device=device)]


# Every way a strided nested tensor reaches flagos; each made one on which nothing ran, repr included.
NESTED_WAYS = {
    "nested_tensor(device=flagos)": lambda: torch.nested.nested_tensor(_parts(), device="flagos"),
    "nested_tensor(numbers, device=flagos)": lambda: torch.nested.nested_tensor([[1.0, 2.0], [3.0]], device="flagos"),
    "nested_tensor(flagos tensors)": lambda: torch.nested.nested_tensor(_parts("flagos")),
    "as_nested_tensor(device=flagos)": lambda: torch.nested.as_nested_tensor(_parts(), device="flagos"),
    "as_nested_tensor(flagos tensor)": lambda: torch.nested.as_nested_tensor(torch.ones(2, 3, device="flagos")),
    "_nested_from_padded": lambda: torch._nested_from_padded(torch.ones(2, 3, device="flagos"), SIZES),
    ".to(flagos)": lambda: torch.nested.nested_tensor(_parts()).to("flagos"),
    "cpu nested tensor + flagos": lambda: torch.nested.nested_tensor(_parts()) + torch.tensor(1.0, device="flagos"),
}


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
@pytest.mark.parametrize("way", NESTED_WAYS.values(), ids=NESTED_WAYS.keys())
def test_strided_nested_tensors_are_refused_naming_the_jagged_layout(way):
    with pytest.raises(NotImplementedError, match=NESTED_REFUSED):
        way()


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_jagged_nested_tensors_and_cpu_nested_tensors_work():
    parts = [torch.randn(2, 3), torch.randn(4, 3)]
    jagged = torch.nested.nested_tensor(parts, layout=torch.jagged, device="flagos")
    padded = (jagged * 2).sin().to_padded_tensor(0.0)
    want = torch.nested.nested_tensor(parts, layout=torch.jagged).mul(2).sin().to_padded_tensor(0.0)
    assert padded.device.type == "flagos" and "NestedTensor" in repr(jagged)
    torch.testing.assert_close(padded.cpu(), want)
    on_cpu = torch.nested.nested_tensor([p.to("flagos") for p in parts], device="cpu")
    assert on_cpu.is_nested and on_cpu.device.type == "cpu"
    torch.testing.assert_close(on_cpu.to_padded_tensor(0.0), torch.nested.nested_tensor(parts).to_padded_tensor(0.0))
