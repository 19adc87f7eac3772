"""Inductor's Python wrapper for flagos graphs, and the device lines it writes (DeviceOpOverrides).

The wrapper is PyTorch's own Python wrapper with two flagos rules:
- buffers are allocated on the flagos device by index (`empty_strided_flagos(size, stride, dtype, 1)`, torch_fl's
  C++ allocation function): inductor relies on a device guard for the index only on GPU device types, and host
  backing is not one;
- on host backing the kernels are inductor's C++ kernels, called as on the CPU (they take the tensors' data
  pointers, which are host memory).
On a CUDA backing the kernels are Triton kernels launched on the current flagos stream, which is the current
CUDA stream of the same index (flagos streams are CUDA streams).
"""

from __future__ import annotations

from textwrap import dedent

import torch
from torch._inductor import config as inductor_config
from torch._inductor.codegen.common import DeviceOpOverrides
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen

from torch_fl._core import DEVICE_NAME
from torch_fl.flagos._device import on_cuda

_CPU = torch.device("cpu")


class FlagosDeviceOpOverrides(DeviceOpOverrides):
    """The device lines inductor writes into a flagos wrapper: torch.flagos calls, and on a CUDA backing the
    raw CUDA stream behind the current flagos stream."""

    def import_get_raw_stream_as(self, name: str) -> str:
        if on_cuda():
            return f"from torch._C import _cuda_getCurrentRawStream as {name}"
        return dedent(
            f"""
            def {name}(_):
                return 0
            """
        )

    def set_device(self, device_idx: int) -> str:
        return f"torch.flagos.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.flagos.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.flagos.device({device_idx})"

    def current_stream(self) -> str:
        return "torch.flagos.current_stream()"

    def cpp_kernel_type(self) -> str:
        return "void*"


class _FlagosRules:
    """The flagos rules, mixed into PyTorch's wrapper and its subgraph wrapper (control flow bodies)."""

    def generate_kernel_call(self, kernel_name, call_args, *, device=None, triton=True, **kwargs):
        if not triton and not on_cuda():
            device = device or _current_device()
            if device.type == DEVICE_NAME:
                device = _CPU  # an inductor C++ kernel over host memory: called as on the CPU
        return super().generate_kernel_call(kernel_name, call_args, device=device, triton=triton, **kwargs)

    def make_allocation(self, name, device, dtype, shape, stride, *args, **kwargs):
        if device is not None and device.type == DEVICE_NAME:
            device = torch.device(DEVICE_NAME, _index_of(device))
            return _allocation(self, name, device, dtype, shape, stride, *args, **kwargs)
        return super().make_allocation(name, device, dtype, shape, stride, *args, **kwargs)


def _current_device() -> torch.device:
    from torch._inductor.virtualized import V

    return V.graph.get_current_device_or_throw()


def _index_of(device: torch.device) -> int:
    return device.index if device.index is not None else torch.flagos.current_device()


#: the wrapper module's name for torch_fl._C._empty_strided (written into FlagosWrapperCodegen's header)
ALLOCATOR = "empty_strided_flagos"


def _allocation(wrapper, name, device, dtype, shape, stride, allocation_shape=None, is_pinned=False):
    """A buffer on flagos:N: torch_fl's C++ allocation function, as inductor calls `empty_strided_cuda` for
    CUDA (a compiled graph allocates hundreds of buffers per call; the Python argument parser and the
    dispatcher cost microseconds each). A wrapper under another device's header gets `empty_strided`."""
    shape_text = wrapper.codegen_python_shape_tuple(shape)
    alloc_text = wrapper.codegen_python_shape_tuple(shape if allocation_shape is None else allocation_shape)
    stride_text = wrapper.codegen_python_shape_tuple(stride)
    root = wrapper
    while isinstance(getattr(root, "parent_wrapper", None), PythonWrapperCodegen):  # a subgraph's: its parent's
        root = root.parent_wrapper
    if isinstance(root, FlagosWrapperCodegen) and not inductor_config.test_configs.track_memory_lifecycle:
        out = f"{name} = {ALLOCATOR}({alloc_text}, {stride_text}, {dtype}, {device.index})"
    else:
        out = f"{name} = empty_strided({alloc_text}, {stride_text}, device='{device}', dtype={dtype})"
    if shape_text != alloc_text:
        out += f".as_strided({shape_text}, {stride_text})"
    return out


class FlagosSubgraphWrapperCodegen(_FlagosRules, SubgraphPythonWrapperCodegen):
    pass


class FlagosWrapperCodegen(_FlagosRules, PythonWrapperCodegen):
    """The Python wrapper of a flagos graph (registered with register_backend_for_device)."""

    def write_header(self) -> None:
        super().write_header()
        self.header.writeline(f"from torch_fl._C import _empty_strided as {ALLOCATOR}")

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return FlagosSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return FlagosWrapperCodegen()
