"""safetensors onto flagos. safetensors checks device names against its own list ('device flagos is
invalid'), so a flagos load goes through the backing device: on a GPU the library's own load onto
cuda:i, then a zero-copy flagos view (the memory is the CUDA caching allocator's, which flagos shares);
on host memory the library's load (a memory map), then one copy into flagos memory, so the tensors are
flagos's own, writable and counted in torch.flagos's memory statistics.

`torch_fl.integrations.load_file(path, device)` is this loader; the safetensors adapter (opt-in:
torch_fl.integrations.enable()) makes `safetensors.torch.load_file(path, device="flagos")` call it.
"""

from __future__ import annotations

import functools

import torch

from torch_fl._core import DEVICE_NAME, as_flagos, backing


def _flagos_device(device) -> torch.device | None:
    """The flagos device `device` names (str, torch.device), or None for any other device."""
    if isinstance(device, torch.device):
        return device if device.type == DEVICE_NAME else None
    if isinstance(device, str) and device.split(":")[0] == DEVICE_NAME:
        return torch.device(device)
    return None


def load_file(filename, device="flagos", **kwargs) -> dict[str, torch.Tensor]:
    """The tensors of a .safetensors file on flagos device `device` ("flagos", "flagos:i" or a torch.device)."""
    import safetensors.torch

    target = _flagos_device(device)
    if target is None:
        raise ValueError(f"torch_fl.integrations.load_file loads onto flagos; got device={device!r}")
    index = target.index if target.index is not None else torch.flagos.current_device()
    load = getattr(safetensors.torch.load_file, "__wrapped__", safetensors.torch.load_file)
    if backing() == "cpu":
        return {name: t.to(torch.device(DEVICE_NAME, index)) for name, t in load(filename, "cpu", **kwargs).items()}
    tensors = load(filename, f"{backing()}:{index}", **kwargs)
    return {name: as_flagos(t) for name, t in tensors.items()}


def install(st_torch) -> None:
    """The adapter: `safetensors.torch.load_file(..., device=<flagos>)` loads through load_file above."""
    original = st_torch.load_file
    if getattr(original, "_torch_fl", False):
        return

    @functools.wraps(original)
    def patched(filename, device="cpu", **kwargs):
        if _flagos_device(device) is not None:
            return load_file(filename, device, **kwargs)
        return original(filename, device, **kwargs)

    patched._torch_fl = True
    st_torch.load_file = patched
