"""Convolutions on flagos under fake tensors (torch.compile, torch.export): the output layout of the kernel
that will run.

A flagos convolution runs the backing device's kernel (host: oneDNN or CPU's own; CUDA: cuDNN), and that
kernel picks its output's memory format by its backend: oneDNN and cuDNN give channels_last outputs (and
weight gradients) for channels_last inputs. PyTorch's fake kernel predicts the format by asking which
backend the input's device would use: for a PrivateUse1 device the answer is "Overrideable", whose format
is contiguous. The prediction then disagrees with the real strides and inductor's stride assertions fail,
for any compiled conv2d on host flagos (inductor's layout optimization gives convolutions channels_last
inputs) and for channels_last models in training.

The fake kernel below runs PyTorch's own fake convolution on stand-ins for the flagos tensors on the backing
device (fake too: no memory), then returns its outputs on the flagos device with the strides it predicted.
"""

from __future__ import annotations

import functools

import torch
from torch.utils import _pytree as pytree

from torch_fl._core import DEVICE_NAME
from torch_fl.flagos._device import backing_device

_aten = torch.ops.aten
OPS = (
    _aten.convolution.default,
    _aten._convolution.default,
    _aten._convolution.deprecated,
    _aten.convolution_backward.default,
)


def install(fake_impls) -> None:
    """Wrap PyTorch's fake kernels of the convolution operators (torch._subclasses.fake_impls; idempotent)."""
    table = fake_impls.op_implementations_dict
    for op in OPS:
        impl = table.get(op)
        if impl is not None and not getattr(impl, "_flagos", False):
            table[op] = _as_on_backing(impl)


def _as_on_backing(impl):
    from torch._subclasses.fake_tensor import FakeTensor

    def is_flagos(t) -> bool:
        return isinstance(t, FakeTensor) and t.fake_device.type == DEVICE_NAME

    @functools.wraps(impl)
    def flagos_conv(fake_mode, func, *args, **kwargs):
        device = next((t.fake_device for t in pytree.tree_leaves((args, kwargs)) if is_flagos(t)), None)
        if device is None:
            return impl(fake_mode, func, *args, **kwargs)
        backing = backing_device(device)

        def to_backing(t):
            return _moved(fake_mode, t, backing) if is_flagos(t) else t

        out = impl(fake_mode, func, *pytree.tree_map(to_backing, args), **pytree.tree_map(to_backing, kwargs))
        return pytree.tree_map(lambda t: _moved(fake_mode, t, device) if isinstance(t, FakeTensor) else t, out)

    flagos_conv._flagos = True
    return flagos_conv


def _moved(fake_mode, t, device: torch.device):
    """A fake tensor with t's sizes, strides and dtype on `device` (the metadata alone: fake tensors have no
    memory)."""
    from torch._subclasses.fake_tensor import FakeTensor

    meta = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="meta")
    return FakeTensor(fake_mode, meta, device)
