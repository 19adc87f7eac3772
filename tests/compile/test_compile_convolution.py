"""Convolutions under torch.compile on flagos: the fake kernel predicts the layout the backing device's kernel
gives (torch_fl/compile/convolution.py), so inductor's stride checks hold and compiled results match eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_fl  # noqa: F401

pytestmark = pytest.mark.anyplatform

CL = torch.channels_last


def _fake(*tensors):
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    return mode, [mode.from_tensor(t) for t in tensors]


@pytest.mark.parametrize("layout", ["contiguous", "input channels_last", "weight channels_last"])
def test_fake_convolution_has_the_real_strides(layout):
    x = torch.randn(2, 3, 8, 8, device="flagos")
    w = torch.randn(5, 3, 3, 3, device="flagos")
    x = x.to(memory_format=CL) if layout == "input channels_last" else x
    w = w.to(memory_format=CL) if layout == "weight channels_last" else w
    real = F.conv2d(x, w, padding=1)
    mode, (fx, fw) = _fake(x, w)
    with mode:
        fake = F.conv2d(fx, fw, padding=1)
    assert (fake.shape, fake.stride(), fake.device) == (real.shape, real.stride(), real.device)


def test_fake_convolution_backward_has_the_real_strides():
    x = torch.randn(2, 3, 10, 10, device="flagos").to(memory_format=CL)
    w = torch.randn(8, 3, 3, 3, device="flagos").to(memory_format=CL)
    grad = torch.randn(2, 8, 8, 8, device="flagos").to(memory_format=CL)
    args = ([8], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, True])
    real = torch.ops.aten.convolution_backward(grad, x, w, *args)
    mode, (fg, fx, fw) = _fake(grad, x, w)
    with mode:
        fake = torch.ops.aten.convolution_backward(fg, fx, fw, *args)
    for r, f in zip(real, fake, strict=True):
        assert (f.shape, f.stride(), f.device) == (r.shape, r.stride(), r.device)


def test_cpu_fake_convolutions_are_untouched():
    x, w = torch.randn(2, 3, 8, 8).to(memory_format=CL), torch.randn(5, 3, 3, 3)
    mode, (fx, fw) = _fake(x, w)
    with mode:
        fake = F.conv2d(fx, fw)
    assert fake.stride() == F.conv2d(x, w).stride() and fake.device.type == "cpu"


def test_compiled_conv_net_inference_matches_eager():
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.ConvTranspose2d(8, 4, 2)
    ).to("flagos")
    conv1d = torch.nn.Conv1d(4, 6, 3).to("flagos")
    x, seq = torch.randn(2, 3, 16, 16, device="flagos"), torch.randn(2, 4, 20, device="flagos")
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(net)(x), net(x))
        torch.testing.assert_close(torch.compile(conv1d)(seq), conv1d(seq))


def test_compiled_channels_last_training_step_matches_eager():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.GELU(), torch.nn.Conv2d(8, 4, 3))
    model = model.to("flagos", memory_format=CL)
    twin = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.GELU(), torch.nn.Conv2d(8, 4, 3))
    twin.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 12, 12, device="flagos").to(memory_format=CL)
    loss = torch.compile(model)(x).square().mean()
    loss.backward()
    eager = twin(x.cpu()).square().mean()
    eager.backward()
    torch.testing.assert_close(loss.cpu(), eager, rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)


def test_compiled_convolution_with_dynamic_shapes():
    torch._dynamo.reset()
    conv = torch.nn.Conv2d(3, 8, 3).to("flagos")
    compiled = torch.compile(conv, dynamic=True)
    for n in (2, 3):
        x = torch.randn(n, 3, 9 + n, 10, device="flagos").to(memory_format=CL)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), conv(x))
