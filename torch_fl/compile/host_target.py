"""What inductor's C++ path needs to treat flagos on host backing as the CPU memory it is.

Inductor asks device-type questions whose answer for a flagos device on host backing must be the CPU's,
because its kernels are inductor's C++ kernels over host memory:
- `get_current_backend()`: which codegen backend runs this device ("cpp" here; by default any device type
  but cpu/mps/xpu/tpu gets config.cuda_backend, "triton", and C++ codegen then misses its dtype propagation);
- `BaseSchedulerNode.is_cpu()`: before fusion and loop-reindexing decisions that only GPU codegen supports;
- `use_scatter_fallback(..., src_device_type, ...)`: a scatter-add onto the CPU runs ATen's kernel, as C++
  codegen's vectorized atomic add cannot take every index (a compiled `scatter_add` failed inductor's
  assertion on flagos);
- `ir.get_device_type(x) == "cpu"` in the reductions' lowering: argmax/argmin over several dimensions of a
  non-contiguous input compute the logical index (the position in the input's own shape) only for Triton
  and the CPU; on flagos they returned the position in memory, silently wrong.
Other device types are unaffected; a CUDA backing needs none of them (Triton codegen, see triton_target).
"""

from __future__ import annotations

import sys

from torch_fl._core import DEVICE_NAME

# The modules that import get_current_backend by name (each holds its own reference).
_BACKEND_USERS = (
    "torch._inductor.utils",
    "torch._inductor.codegen.common",
    "torch._inductor.scheduler",
    "torch._inductor.kernel.mm_common",
)


def _rebind(attr: str, original, replacement, modules) -> None:
    """Mark `replacement` as flagos's and put it in place of `original` in each of `modules` (those imported)
    that holds `original` under `attr`: inductor's modules import such functions by name, each a reference
    of its own."""
    replacement._flagos = True
    for name in modules:
        module = sys.modules.get(name)
        if module is not None and getattr(module, attr, None) is original:
            setattr(module, attr, replacement)


def _patch_current_backend() -> None:
    from torch._inductor import utils
    from torch._inductor.virtualized import V

    original = getattr(utils, "get_current_backend", None)
    if original is None or getattr(original, "_flagos", False):
        return  # a torch without the question has nothing to answer differently

    def get_current_backend(device_type: str | None = None) -> str:
        if not device_type:
            device_type = V.graph.get_current_device_or_throw().type
        if device_type == DEVICE_NAME:
            return "cpp"
        return original(device_type)

    _rebind("get_current_backend", original, get_current_backend, _BACKEND_USERS)


def _patch_is_cpu() -> None:
    from torch._inductor.scheduler import BaseSchedulerNode

    is_cpu = getattr(BaseSchedulerNode, "is_cpu", None)
    if is_cpu is None or getattr(is_cpu, "_flagos", False):
        return

    def flagos_is_cpu(self) -> bool:
        if is_cpu(self):
            return True
        device = self.get_device()
        return device is not None and device.type == DEVICE_NAME

    flagos_is_cpu._flagos = True
    BaseSchedulerNode.is_cpu = flagos_is_cpu


# The modules that import use_scatter_fallback by name.
_SCATTER_USERS = ("torch._inductor.utils", "torch._inductor.lowering", "torch._inductor.decomposition")


def _patch_scatter_fallback() -> None:
    import inspect

    from torch._inductor import utils

    original = getattr(utils, "use_scatter_fallback", None)
    if original is None or getattr(original, "_flagos", False):
        return
    signature = inspect.signature(original)
    if "src_device_type" not in signature.parameters:
        return  # a torch that asks otherwise has nothing to answer differently here

    def use_scatter_fallback(*args, **kwargs) -> bool:
        bound = signature.bind(*args, **kwargs)
        if bound.arguments.get("src_device_type") == DEVICE_NAME:
            bound.arguments["src_device_type"] = "cpu"
        return original(*bound.args, **bound.kwargs)

    _rebind("use_scatter_fallback", original, use_scatter_fallback, _SCATTER_USERS)


def _patch_argreduce_index() -> None:
    from torch._inductor import ir, lowering

    original = getattr(lowering, "_make_reduction_inner", None)
    if original is None or getattr(original, "_flagos", False):
        return
    device_type = ir.get_device_type

    def as_cpu(x):
        kind = device_type(x)
        return "cpu" if kind == DEVICE_NAME else kind

    def _make_reduction_inner(x, *args, **kwargs):
        if device_type(x) != DEVICE_NAME:
            return original(x, *args, **kwargs)
        # Its only device-type question asks through the ir module; answered as for the CPU during the
        # call (lowering runs in the compiling thread).
        ir.get_device_type = as_cpu
        try:
            return original(x, *args, **kwargs)
        finally:
            ir.get_device_type = device_type

    _make_reduction_inner._flagos = True
    lowering._make_reduction_inner = _make_reduction_inner


def install() -> None:
    """Make inductor answer as for the CPU for flagos (idempotent; call on host backing only)."""
    import importlib

    try:
        importlib.import_module("torch._inductor.kernel.mm_common")  # so that its reference is patched too
    except ModuleNotFoundError:
        pass  # a torch without that module holds no reference to patch

    for module in ("torch._inductor.lowering", "torch._inductor.decomposition"):
        importlib.import_module(module)  # so that their references are patched too
    _patch_current_backend()
    _patch_is_cpu()
    _patch_scatter_fallback()
    _patch_argreduce_index()
