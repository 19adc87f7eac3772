"""Devices: count, current device, properties, synchronisation."""

from __future__ import annotations

import contextlib
import os
import platform
from dataclasses import dataclass

import torch

from torch_fl._core import _C, DEVICE_NAME

# The device argument torch.cuda's functions take: an index, 'flagos:N', a torch.device, or None (current).
Device = torch.device | str | int | None


def on_cuda() -> bool:
    """True when flagos is backed by CUDA devices (else host memory)."""
    return _C._backing() == "cuda"


def backing_device(device: torch.device) -> torch.device:
    """The backing device behind flagos `device`: cuda:i behind flagos:i on a CUDA backing (no index: the current
    device's), the CPU on host backing."""
    if not on_cuda():
        return torch.device("cpu")
    return torch.device("cuda", device.index if device.index is not None else current_device())


def invalid_index_error(idx: int, count: int) -> torch.AcceleratorError:
    """The error for a device index out of range: CUDA raises torch.AcceleratorError for an invalid ordinal."""
    where = "host memory; set FLAGOS_HOST_DEVICES=N for more" if not on_cuda() else "one per CUDA device"
    return torch.AcceleratorError(
        f"flagos device index {idx} is out of range: this process has {count} flagos device(s) ({where}); "
        f"use an index from 0 to {count - 1}"
    )


def needs_cuda_backing(name: str, why: str) -> RuntimeError:
    """The error for a torch.cuda function that only a CUDA backing can answer."""
    return RuntimeError(f"torch.flagos.{name} needs a CUDA backing: {why}")


def cuda_function(name: str):
    """torch.cuda.<name>, or a clear error where this torch has none (names differ between torch releases)."""
    fn = getattr(torch.cuda, name, None)
    if fn is None:
        raise RuntimeError(f"torch.flagos.{name} delegates to torch.cuda.{name}, which torch {torch.__version__} lacks")
    return fn


def _index(device=None, optional: bool = True) -> int:
    """The flagos index a torch.cuda-style `device` argument names."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        idx = current_device() if device == -1 else device  # -1: the current device, as CUDA's C++ API reads it
    else:
        d = torch.device(device) if isinstance(device, str) else device
        if not isinstance(d, torch.device):
            raise TypeError(f"expected a flagos device, index or None, got {type(device).__name__}")
        if d.type != DEVICE_NAME:
            raise ValueError(f"expected a flagos device, got {d}; use 'flagos' or 'flagos:N'")
        idx = current_device() if d.index is None else d.index
    count = device_count()
    if not 0 <= idx < count:
        raise invalid_index_error(idx, count)
    return idx


def is_available() -> bool:
    return device_count() > 0


def is_initialized() -> bool:
    return _C._initialized()


def init() -> None:
    """Initialise the backing device (CUDA's lazy init on a GPU backing), then flagos's C++ lazy init."""
    if on_cuda():
        torch.cuda.init()
    _C._lazy_init_device()


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def set_device(device) -> None:
    if isinstance(device, int) and device < 0:
        return  # a negative index leaves the current device, as torch.cuda.set_device(-1) does
    torch.accelerator.set_device_index(_index(device))


class device(contextlib.ContextDecorator):  # noqa: N801  (named like torch.cuda.device)
    """Context manager that makes `device` the current flagos device."""

    def __init__(self, device):
        # None or a negative index: a context that changes nothing, as torch.cuda.device(-1)
        self.idx = -1 if device is None or (isinstance(device, int) and device < 0) else _index(device)
        self.prev = -1

    # One C call each way (what torch.accelerator.device_index uses), as torch.cuda.device's _exchange_device:
    # inductor's compiled flagos graphs enter this guard on every call.
    def __enter__(self):
        if self.idx >= 0:
            self.prev = torch._C._accelerator_exchangeDevice(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0:
            torch._C._accelerator_maybeExchangeDevice(self.prev)
        return False


class device_of(device):  # noqa: N801
    """Context manager that makes the device of tensor `obj` current (no-op for non-flagos tensors)."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == DEVICE_NAME else None)


def synchronize(device=None) -> None:
    torch.accelerator.synchronize(_index(device))


@dataclass(frozen=True)
class HostDeviceProperties:
    """Properties of a host-memory flagos device (mirrors the fields of torch.cuda's)."""

    name: str
    total_memory: int
    multi_processor_count: int
    major: int = 0
    minor: int = 0
    is_integrated: bool = True


def _host_total_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def get_device_properties(device=None):
    idx = _index(device)
    if on_cuda():
        return torch.cuda.get_device_properties(idx)
    cpu = platform.processor() or platform.machine()
    return HostDeviceProperties(f"flagos host memory ({cpu})", _host_total_memory(), os.cpu_count() or 1)


def get_device_name(device=None) -> str:
    return get_device_properties(device).name


def get_device_capability(device=None) -> tuple[int, int]:
    props = get_device_properties(device)
    return props.major, props.minor


def can_device_access_peer(device: Device, peer_device: Device) -> bool:
    """Whether `device` can read `peer_device`'s memory (host backing: one host memory, always)."""
    idx, peer = _index(device), _index(peer_device)
    if on_cuda():
        return torch.cuda.can_device_access_peer(idx, peer)
    return True


def get_arch_list() -> list[str]:
    """The GPU architectures the backing's kernels were compiled for (none on host backing)."""
    return torch.cuda.get_arch_list() if on_cuda() else []


def get_gencode_flags() -> str:
    """The backing's nvcc -gencode flags (empty on host backing)."""
    return torch.cuda.get_gencode_flags() if on_cuda() else ""


def ipc_collect() -> None:
    """Frees memory released by CUDA IPC consumers; host backing shares no tensors through CUDA IPC."""
    if on_cuda():
        torch.cuda.ipc_collect()
