"""What inductor's Triton path needs to treat flagos on a CUDA backing as the GPU it is.

flagos:i is cuda:i underneath: Triton kernels for a flagos graph are CUDA kernels for that GPU, launched on
the current flagos stream (a CUDA stream). Inductor decides two things by device type, so on a CUDA backing:
- "flagos" is one of inductor's GPU device types (torch._inductor.utils.GPU_TYPES): GPU scheduling, fusion
  and device guards apply to flagos graphs;
- the device properties inductor compiles a Triton kernel for (DeviceProperties.create, which also names
  Triton's target backend) are those of the CUDA device behind the flagos device, so Triton targets CUDA.
Inductor's GEMM template configurations (template_heuristics, looked up by device type: without an entry it logs
an error for each matrix product it lowers and offers no Triton template) are CUDA's for flagos too.
Nothing changes for other device types. Host backing needs none of these (inductor's C++ kernels).
"""

from __future__ import annotations

import torch

from torch_fl._core import DEVICE_NAME
from torch_fl.flagos._device import backing_device


def install() -> None:
    """Make inductor treat flagos as a GPU backed by CUDA (idempotent; call on a CUDA backing only)."""
    from torch._inductor import utils
    from torch._inductor.runtime import hints

    if DEVICE_NAME not in utils.GPU_TYPES:
        # get_gpu_type() names the machine's GPU type (hardware properties, benchmarking) and asserts
        # that one type is available; with flagos listed beside the CUDA it runs on, it would see two.
        # The hardware is CUDA's: let it answer (it caches the answer) before flagos joins the list.
        utils.get_gpu_type()
        utils.GPU_TYPES.append(DEVICE_NAME)  # the list every is_gpu() reads, shared by reference

    share_cuda_template_heuristics()
    create = hints.DeviceProperties.create
    if getattr(create, "_flagos", False):
        return

    def flagos_create(cls, device):
        if isinstance(device, torch.device) and device.type == DEVICE_NAME:
            device = backing_device(device)  # on a CUDA backing: cuda:i
        return create(device)

    flagos_create._flagos = True
    hints.DeviceProperties.create = classmethod(flagos_create)


def share_cuda_template_heuristics() -> None:
    """Register each of inductor's template heuristics for 'cuda' for flagos as well (idempotent)."""
    from torch._inductor.template_heuristics import registry

    # The registry has no listing function: its table is read directly (absent in a torch without it).
    table = getattr(registry, "_TEMPLATE_HEURISTIC_REGISTRY", {})
    for (template, device, op), heuristic in list(table.items()):
        if device == "cuda" and (template, DEVICE_NAME, op) not in table:
            registry.register_template_heuristic(template, DEVICE_NAME, op_name=op)(heuristic)
