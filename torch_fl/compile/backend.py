"""Inductor's backend for flagos: which kernels it generates and which wrapper calls them.

- CUDA backing: TritonScheduling, inductor's Triton codegen for GPUs (kernels on the flagos tensors' CUDA
  memory, launched on the current flagos stream; see triton_target);
- host backing: CppScheduling, inductor's C++/OpenMP codegen (kernels over the tensors' host memory).
Both use FlagosWrapperCodegen and FlagosDeviceOpOverrides (wrapper.py). Operators inductor does not generate
code for (mm, bmm, attention, ...) are extern calls through the dispatcher, so they run on their flagos routes.
"""

from __future__ import annotations

import glob
import inspect
import os
import uuid

import torch

from torch_fl._core import DEVICE_NAME
from torch_fl.flagos._device import on_cuda

_HERE = os.path.dirname(os.path.abspath(__file__))


def scheduling_class():
    """The inductor Scheduling that generates flagos kernels on this backing."""
    if on_cuda():
        from torch._inductor.codegen.triton import TritonScheduling

        return TritonScheduling
    from torch._inductor.codegen.cpp import CppScheduling

    return CppScheduling


#: In the cache key while a route cannot be kept in compiled code (graph_pass.unkept_routes): this process's
#: compiles then miss graphs cached by other processes, so the pass runs and warns in each process.
_PROCESS_TOKEN = uuid.uuid4().hex


def _graph_pass():
    """flagos's post-grad pass (graph_pass.py: on a CUDA backing the bmm rewrite; on both, the warning for a
    route compiled code cannot keep), whose uuid also puts what shapes flagos code (backing, this package's
    source, the operators kept as calls) into inductor's cache key: a cached graph compiled otherwise is not
    reused."""
    from torch._inductor.custom_graph_pass import CustomGraphModulePass, get_hash_for_files

    from torch_fl.compile import graph_pass, keep_calls

    class FlagosGraphPass(CustomGraphModulePass):
        def __call__(self, gm: torch.fx.GraphModule) -> None:
            if on_cuda():  # what inductor does for 'cuda' graphs; its CPU graphs keep bmm
                graph_pass.bmm_batch_of_one_to_mm(gm)
            graph_pass.warn_unkept_routes(gm)

        def uuid(self):
            sources = tuple(sorted(glob.glob(os.path.join(_HERE, "*.py"))))
            extra = f"{torch.__version__}|{on_cuda()}|{','.join(keep_calls.kept_calls())}"
            if graph_pass.unkept_routes():
                extra += f"|unkept routes, warned in process {_PROCESS_TOKEN}"
            return get_hash_for_files(sources, extra)

    return FlagosGraphPass()


def register() -> None:
    """Register flagos's inductor backend and device lines (idempotent)."""
    from torch._inductor.codegen import common

    from torch_fl.compile import cudagraphs
    from torch_fl.compile.wrapper import FlagosDeviceOpOverrides, FlagosWrapperCodegen

    cudagraphs.install()
    if on_cuda():
        from torch_fl.compile import triton_target

        triton_target.install()
    else:
        from torch_fl.compile import host_target

        host_target.install()
    # PyTorch 2.11 registers its own device lines (cuda, cpu, ...) on the first lookup, and only while none
    # is registered yet: look one up first, or a cuda graph compiled in this process gets no device guard.
    common.get_device_op_overrides("cpu")
    common.register_device_op_overrides(DEVICE_NAME, FlagosDeviceOpOverrides())
    kwargs = {}
    if "device_custom_pass" in inspect.signature(common.register_backend_for_device).parameters:
        kwargs["device_custom_pass"] = _graph_pass()
    common.register_backend_for_device(DEVICE_NAME, scheduling_class(), FlagosWrapperCodegen, **kwargs)
