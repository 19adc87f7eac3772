"""Dynamo's device interface for flagos: what Dynamo and inductor ask of a device (streams, events, devices,
synchronisation, properties), answered by torch.flagos.

On a CUDA backing flagos:i is cuda:i underneath (its streams are CUDA streams, its memory CUDA memory), so
the answers that inductor's Triton path needs (raw stream, compute capability, properties) are CUDA's for the
same index. On host backing they describe host memory: no raw stream, no compute capability.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface

from torch_fl._core import DEVICE_NAME
from torch_fl.flagos import _device, _streams

# Properties recorded in the main process for inductor's compile workers, which must not touch the device.
_worker_properties: list[Any] = []
_worker_current: list[int] = []


def _index(device: torch.types.Device = None) -> int:
    if isinstance(device, int):
        return device
    return _device._index(device)


def _exchange(index: int) -> int:
    """Make `index` current (a negative index: no change); return the device current before."""
    previous = _device.current_device()
    if index >= 0 and index != previous:
        _device.set_device(index)
    return previous


class FlagosInterface(DeviceInterface):
    """torch._dynamo.device_interface.DeviceInterface for "flagos" (registered by torch_fl.compile)."""

    device = _device.device
    # Dynamo captures streams and events only if they are torch.Stream / torch.Event: flagos's are exactly those.
    Event = _streams.Event
    Stream = _streams.Stream

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            _worker_current[:] = [device]

        @staticmethod
        def current_device() -> int:
            return _worker_current[0] if _worker_current else _device.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            if isinstance(device, str):
                device = torch.device(device)
            if isinstance(device, torch.device):
                if device.type != DEVICE_NAME:
                    raise ValueError(f"expected a flagos device, got {device}")
                device = device.index
            if device is None:
                device = FlagosInterface.Worker.current_device()
            if not _worker_properties:
                _worker_properties.extend(_device.get_device_properties(i) for i in range(_device.device_count()))
            return _worker_properties[device]

    current_device = staticmethod(_device.current_device)
    set_device = staticmethod(_device.set_device)
    device_count = staticmethod(_device.device_count)
    stream = staticmethod(_streams.stream)
    current_stream = staticmethod(_streams.current_stream)
    set_stream = staticmethod(_streams.set_stream)
    synchronize = staticmethod(_device.synchronize)
    exchange_device = staticmethod(_exchange)
    maybe_exchange_device = staticmethod(_exchange)

    @staticmethod
    def is_available() -> bool:
        return _device.is_available()

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        torch.accelerator.set_stream(
            torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)
        )

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        """The cudaStream_t of the current flagos stream (it is the current CUDA stream of the same index);
        0 on host backing, which has no native streams."""
        if _device.on_cuda():
            return torch._C._cuda_getCurrentRawStream(device_idx)
        return 0

    @classmethod
    def get_device_properties(cls, device: torch.types.Device = None) -> Any:
        return _device.get_device_properties(device)

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> int | str:
        """As CudaInterface answers for the backing CUDA device (major * 10 + minor); "" on host backing, as
        the CPU's interface answers."""
        if not _device.on_cuda():
            return ""
        major, minor = _device.get_device_capability(device)
        return major * 10 + minor

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        if _device.on_cuda():
            return torch.cuda.is_bf16_supported(including_emulation)
        return True

    @staticmethod
    def memory_allocated(device: torch.types.Device = None) -> int:
        return torch.flagos.memory_allocated(device)

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        """Triton runs on a CUDA backing (on the CUDA device behind flagos); host backing uses inductor's C++."""
        return _device.on_cuda() and _device.get_device_properties(device).major >= 7

    @staticmethod
    def raise_if_triton_unavailable(device: torch.types.Device = None) -> None:
        if not _device.on_cuda():
            raise RuntimeError(
                "flagos is backed by host memory here: inductor compiles C++ kernels for it, not Triton "
                "(Triton needs flagos backed by a CUDA GPU)"
            )
        from torch._dynamo.device_interface import CudaInterface

        CudaInterface.raise_if_triton_unavailable(_index(device))
