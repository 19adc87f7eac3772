"""safetensors onto flagos. safetensors checks device names against its own list ('device flagos is
invalid'), so a flagos file is opened for the backing device and each tensor handed out on flagos: on a
GPU the library's own load onto cuda:i, then a zero-copy flagos view (the memory is the CUDA caching
allocator's, which flagos shares); on host memory the library's load (a memory map), then one copy into
flagos memory, so the tensors are flagos's own, writable and counted in torch.flagos's memory statistics.

`torch_fl.integrations.load_file(path, device)` loads a file this way with no adapter. The safetensors
adapter (opt-in: torch_fl.integrations.enable()) makes `safe_open(path, "pt", device="flagos:i")` do it:
`safetensors.torch.load_file` opens files through it, and so do accelerate's loaders (a device map over
several devices, offloaded weights) and PEFT's adapter loading.
"""

from __future__ import annotations

import sys

import torch

from torch_fl._core import DEVICE_NAME, as_flagos, backing


def _flagos_device(device) -> torch.device | None:
    """The flagos device `device` names (str, torch.device), or None for any other device."""
    if isinstance(device, torch.device):
        return device if device.type == DEVICE_NAME else None
    if isinstance(device, str) and device.split(":")[0] == DEVICE_NAME:
        return torch.device(device)
    return None


class FlagosSafeOpen:
    """A safetensors file opened for flagos device `device`: safetensors' own `safe_open` on the backing
    device underneath, every tensor it hands out (get_tensor, get_tensors, get_slice(...)[...]) on flagos;
    the rest (keys, offset_keys, metadata) is the file's."""

    def __init__(self, opener, filename, framework: str, device: torch.device, **kwargs):
        index = device.index if device.index is not None else torch.flagos.current_device()
        self._device = torch.device(DEVICE_NAME, index)
        self._host = backing() == "cpu"
        native = "cpu" if self._host else f"cuda:{index}"
        self._file = opener(filename, framework=framework, device=native, **kwargs)

    def _on_flagos(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self._device) if self._host else as_flagos(tensor)

    def get_tensor(self, name: str) -> torch.Tensor:
        return self._on_flagos(self._file.get_tensor(name))

    def get_tensors(self) -> dict[str, torch.Tensor]:
        return {name: self._on_flagos(t) for name, t in self._file.get_tensors().items()}

    def get_slice(self, name: str) -> _FlagosSlice:
        return _FlagosSlice(self._file.get_slice(name), self._on_flagos)

    def __getattr__(self, name):  # keys, offset_keys, metadata, ...
        return getattr(self._file, name)

    def __enter__(self) -> FlagosSafeOpen:
        self._file.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        return self._file.__exit__(*exc)


class _FlagosSlice:
    def __init__(self, piece, on_flagos):
        self._slice, self._on_flagos = piece, on_flagos

    def __getitem__(self, index) -> torch.Tensor:
        return self._on_flagos(self._slice[index])

    def __getattr__(self, name):  # get_shape, get_dtype
        return getattr(self._slice, name)


def _original_safe_open():
    import safetensors

    return getattr(safetensors.safe_open, "__wrapped__", safetensors.safe_open)


def load_file(filename, device="flagos") -> dict[str, torch.Tensor]:
    """The tensors of a .safetensors file on flagos device `device` ("flagos", "flagos:i" or a torch.device)."""
    target = _flagos_device(device)
    if target is None:
        raise ValueError(f"torch_fl.integrations.load_file loads onto flagos; got device={device!r}")
    with FlagosSafeOpen(_original_safe_open(), filename, "pt", target) as f:
        return f.get_tensors()


def install(safetensors_module) -> None:
    """The adapter: `safe_open(..., device=<flagos>)` opens through FlagosSafeOpen, in safetensors and in every
    module already imported that bound the name (`from safetensors import safe_open`: safetensors.torch,
    accelerate's loaders); modules imported later take it from safetensors."""
    original = safetensors_module.safe_open
    if getattr(original, "_torch_fl", False):
        return

    def safe_open(filename, framework, device="cpu", **kwargs):
        target = _flagos_device(device)
        if target is not None:
            return FlagosSafeOpen(original, filename, framework, target, **kwargs)
        return original(filename, framework=framework, device=device, **kwargs)

    safe_open.__doc__ = original.__doc__
    safe_open.__wrapped__ = original
    safe_open._torch_fl = True
    for module in list(sys.modules.values()):
        # the module's own namespace: getattr would run lazy modules' __getattr__ (transformers')
        if getattr(module, "__dict__", {}).get("safe_open") is original:
            module.safe_open = safe_open
