"""Inductor's Python wrapper for flagos graphs, and the device lines it writes (DeviceOpOverrides).

The wrapper is PyTorch's own Python wrapper with these flagos rules:
- it runs on the backing device inside while every operator takes its native route (native_graph.py): its
  inputs pass through `graph_inputs`, its outputs through `graph_outputs`;
- buffers are allocated by index (`graph_empty_strided(size, stride, dtype, 1)`, torch_fl's C++ allocation
  function: native inside, flagos otherwise): inductor relies on a device guard for the index only on GPU device
  types, and host backing is not one;
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
from torch_fl.compile import native_graph
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


def _allocation(wrapper, name, device, dtype, shape, stride, allocation_shape=None, is_pinned=False):
    """A buffer on flagos:N: torch_fl's C++ allocation function, as inductor calls `empty_strided_cuda` for
    CUDA (a compiled graph allocates hundreds of buffers per call; the Python argument parser and the
    dispatcher cost microseconds each), native when the graph runs on the backing device (native_graph.py). A
    wrapper under another device's header gets `empty_strided`."""
    shape_text = wrapper.codegen_python_shape_tuple(shape)
    alloc_text = wrapper.codegen_python_shape_tuple(shape if allocation_shape is None else allocation_shape)
    stride_text = wrapper.codegen_python_shape_tuple(stride)
    root = wrapper
    while isinstance(getattr(root, "parent_wrapper", None), PythonWrapperCodegen):  # a subgraph's: its parent's
        root = root.parent_wrapper
    if isinstance(root, FlagosWrapperCodegen) and not inductor_config.test_configs.track_memory_lifecycle:
        out = f"{name} = {native_graph.ALLOCATE}({alloc_text}, {stride_text}, {dtype}, {device.index})"
    else:
        out = f"{name} = empty_strided({alloc_text}, {stride_text}, device='{device}', dtype={dtype})"
    if shape_text != alloc_text:
        out += f".as_strided({shape_text}, {stride_text})"
    return out


class FlagosSubgraphWrapperCodegen(_FlagosRules, SubgraphPythonWrapperCodegen):
    pass


class FlagosWrapperCodegen(_FlagosRules, PythonWrapperCodegen):
    """The Python wrapper of a flagos graph (registered with register_backend_for_device): it runs on the
    backing device inside when it qualifies (native_graph.py)."""

    def __init__(self):
        super().__init__()
        self.native = native_graph.Qualification()

    def write_header(self) -> None:
        super().write_header()
        for line in native_graph.header_lines():
            self.header.writeline(line)

    def write_args(self, input_names: list[str]) -> None:
        lhs = ", ".join(input_names) + ("," if len(input_names) == 1 else "")
        self.prefix.writeline(
            f"{lhs} = {native_graph.INPUTS}(args, {native_graph.QUALIFIED}, {native_graph.ENTRY_ALIASES})"
        )

    def val_to_arg_str(self, s, type_=None) -> str:
        self.native.note_value(s)
        return super().val_to_arg_str(s, type_)

    def generate_extern_kernel_out(self, node) -> None:
        self.native.note_call(node)
        super().generate_extern_kernel_out(node)

    def generate_extern_kernel_alloc(self, node) -> None:
        self.native.note_call(node)
        super().generate_extern_kernel_alloc(node)

    def generate_fallback_kernel(self, node) -> None:
        self.native.note_call(node)
        super().generate_fallback_kernel(node)

    def generate_return(self, output_refs: list[str]) -> None:
        """The outputs through graph_outputs: its flagos outputs (by position) become flagos tensors again. The
        buffers' own names are deleted first, so that a fresh buffer is retagged in place (only the list holds
        it) instead of wrapped."""
        outputs = self.get_graph_outputs()
        positions = [i for i, out in enumerate(outputs) if _device_type(out) == DEVICE_NAME]
        if not positions:
            super().generate_return(output_refs)
            return
        index = _index_of(_device_of(outputs[positions[0]]))
        buffers = sorted({ref for ref in output_refs if ref.isidentifier() and ref.startswith("buf")})
        self.wrapper_call.writeline(f"outputs = [{', '.join(output_refs)}]")
        if buffers:
            self.wrapper_call.writeline(f"del {', '.join(buffers)}")
        self.wrapper_call.writeline(f"return {native_graph.OUTPUTS}(outputs, {index}, {tuple(positions)!r})")

    def generate_end(self, result) -> None:
        super().generate_end(result)
        for part in (self.subgraph_definitions, self.prefix, self.wrapper_call):
            self.native.note_code(part.getvalue())
        result.writeline(f"{native_graph.QUALIFIED} = {self.native.qualified!r}")
        for reason in self.native.reasons[:3]:
            result.writeline(f"# not on the backing device inside: {reason}")

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return FlagosSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return FlagosWrapperCodegen()


def _device_of(node):
    get = getattr(node, "get_device", None)
    return get() if get is not None else None


def _device_type(node) -> str | None:
    device = _device_of(node)
    return device.type if device is not None else None
