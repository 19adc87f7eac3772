"""flagos's autograd kernels (autograd_shortcut.cpp): a call autograd records nothing for skips PyTorch's
autograd kernel, and every other call gets exactly what PyTorch's autograd kernel gives it.

Each case runs on the native device and on flagos and compares what autograd made of it: whether the
result requires a gradient, its grad_fn, the gradients, forward-mode tangents, what a Python dispatch mode
sees, and the values. Cases with a backward take the CPU as their reference: a native CUDA backward fails in
a process that registered a PrivateUse1 device (PyTorch issue 161129, README "Known limitations").
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.utils._python_dispatch import TorchDispatchMode

from tests.conftest import NATIVE

pytestmark = pytest.mark.anyplatform

has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key


def test_functional_typed_operators_have_a_flagos_autograd_kernel_and_in_place_forms_do_not():
    for op in ("aten::mul.Tensor", "aten::add.Tensor", "aten::mm", "aten::cat", "aten::index.Tensor", "aten::_to_copy"):
        assert has_kernel(op, "AutogradPrivateUse1"), op
    # In-place and out= forms keep PyTorch's autograd kernel: ADInplaceOrView bumps their version counter.
    for op in ("aten::add_.Tensor", "aten::mul_.Tensor", "aten::copy_", "aten::fill_.Scalar", "aten::zero_"):
        assert not has_kernel(op, "AutogradPrivateUse1"), op


def pair(*shape: int, seed: int, requires_grad: bool = False, dtype=torch.float32, native=NATIVE):
    """The same random tensor on flagos and on `native`, as leaves (flagos first: on the CPU the native
    copy is `t` itself)."""
    t = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    return t.to("flagos").requires_grad_(requires_grad), t.to(native).requires_grad_(requires_grad)


CALLS = {
    "mul": lambda a, w: a * w,
    "add": lambda a, w: a + w,
    "mm": lambda a, w: a @ w,
    "cat": lambda a, w: torch.cat([a, w]),
    "softmax": lambda a, w: torch.softmax(a * w, dim=-1),
    "index": lambda a, w: a[torch.tensor([0, 2], device=a.device)] * w[1],
    # _to_copy's kernel below autograd is BackendSelect's, which then picks flagos (or the CPU for a device argument)
    "to dtype": lambda a, w: a.to(torch.float64) * w.to(torch.float64),
    "to cpu": lambda a, w: a.to("cpu") * w.to("cpu"),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_recorded_call_gets_the_same_graph_and_gradients(name):
    fn = CALLS[name]
    a_f, a_n = pair(3, 3, seed=1, requires_grad=True, native="cpu")
    w_f, w_n = pair(3, 3, seed=2, native="cpu")
    out_n, out_f = fn(a_n, w_n), fn(a_f, w_f)
    assert out_f.requires_grad and type(out_f.grad_fn) is type(out_n.grad_fn)
    out_n.sum().backward()
    out_f.sum().backward()
    torch.testing.assert_close(a_f.grad.cpu(), a_n.grad.cpu())


@pytest.mark.parametrize("name", sorted(CALLS))
def test_no_grad_with_weights_that_require_grad_records_nothing(name):
    fn = CALLS[name]
    a_f, a_n = pair(3, 3, seed=3)
    w_f, w_n = pair(3, 3, seed=4, requires_grad=True)  # a parameter under no_grad
    with torch.no_grad():
        out_n, out_f = fn(a_n, w_n), fn(a_f, w_f)
    assert not out_f.requires_grad and out_f.grad_fn is None and out_f.is_leaf
    torch.testing.assert_close(out_f.cpu(), out_n.cpu())


def test_grad_mode_on_with_no_input_requiring_grad_records_nothing():
    a_f, a_n = pair(3, 3, seed=5, native="cpu")
    out = a_f * a_f
    assert not out.requires_grad and out.grad_fn is None
    # and a later op on it with a leaf that requires grad records from there on
    w_f, w_n = pair(3, 3, seed=6, requires_grad=True, native="cpu")
    (out * w_f).sum().backward()
    torch.testing.assert_close(w_f.grad.cpu(), (a_n * a_n).detach().cpu())


@pytest.mark.parametrize("grad_enabled", [True, False])
def test_forward_mode_tangents_pass_through_with_and_without_grad_mode(grad_enabled):
    x_f, x_n = pair(3, 3, seed=7)
    t_f, t_n = pair(3, 3, seed=8)
    w_f, w_n = pair(3, 3, seed=9)
    tangents = []
    for x, t, w in ((x_n, t_n, w_n), (x_f, t_f, w_f)):
        with fwAD.dual_level(), torch.set_grad_enabled(grad_enabled):
            y = torch.sin(fwAD.make_dual(x, t)) @ w
            tangent = fwAD.unpack_dual(y).tangent
            assert tangent is not None
            tangents.append(tangent.cpu())
    torch.testing.assert_close(tangents[1], tangents[0])


def test_a_python_dispatch_mode_under_no_grad_sees_every_call():
    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    seen = []
    for device in (NATIVE, torch.device("flagos")):
        a = torch.ones(2, 2, device=device)
        with torch.no_grad(), Record() as mode:
            (a * a) @ a
        seen.append(mode.ops)
    assert seen[1] == seen[0] == ["aten.mul.Tensor", "aten.mm.default"]


def test_a_conjugate_view_takes_pytorchs_path_and_is_resolved_the_same():
    z_f, z_n = pair(4, seed=10, dtype=torch.complex64)
    w_f, w_n = pair(4, seed=11, dtype=torch.complex64)
    with torch.no_grad():
        out_n, out_f = z_n.conj() * w_n, z_f.conj() * w_f
    torch.testing.assert_close(out_f.cpu(), out_n.cpu())


def test_torch_func_transforms_on_flagos():
    x_f, x_n = pair(5, seed=12, native="cpu")
    for x in (x_n, x_f):
        assert torch.func.grad(lambda v: (v * v).sum())(x).device == x.device
    torch.testing.assert_close(
        torch.func.grad(lambda v: (v * v).sum())(x_f).cpu(), torch.func.grad(lambda v: (v * v).sum())(x_n).cpu()
    )
    torch.testing.assert_close(
        torch.vmap(lambda v: v * 2 + v)(x_f.view(5, 1)).cpu(), torch.vmap(lambda v: v * 2 + v)(x_n.view(5, 1)).cpu()
    )
