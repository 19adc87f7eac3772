"""What inductor's C++ path needs to treat flagos on host backing as the CPU memory it is.

Inductor asks two device-type questions whose answer for a flagos device on host backing must be the CPU's,
because its kernels are inductor's C++ kernels over host memory:
- `get_current_backend()`: which codegen backend runs this device ("cpp" here; by default any device type
  but cpu/mps/xpu/tpu gets config.cuda_backend, "triton", and C++ codegen then misses its dtype propagation);
- `BaseSchedulerNode.is_cpu()`: before fusion and loop-reindexing decisions that only GPU codegen supports.
Other device types are unaffected; a CUDA backing needs neither (Triton codegen, see triton_target).
"""

from __future__ import annotations

import sys

from torch_fl._loader import DEVICE_NAME

# The modules that import get_current_backend by name (each holds its own reference).
_BACKEND_USERS = (
    "torch._inductor.utils",
    "torch._inductor.codegen.common",
    "torch._inductor.scheduler",
    "torch._inductor.kernel.mm_common",
)


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

    get_current_backend._flagos = True
    for name in _BACKEND_USERS:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "get_current_backend", None) is original:
            module.get_current_backend = get_current_backend


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


def install() -> None:
    """Make inductor answer as for the CPU for flagos (idempotent; call on host backing only)."""
    import importlib

    try:
        importlib.import_module("torch._inductor.kernel.mm_common")  # so that its reference is patched too
    except ModuleNotFoundError:
        pass  # a torch without that module holds no reference to patch

    _patch_current_backend()
    _patch_is_cpu()
