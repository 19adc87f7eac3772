"""Streams and events. On a CUDA backing a flagos stream is a CUDA stream."""

from __future__ import annotations

import torch

from torch_fl._core import _C, DEVICE_NAME
from torch_fl.flagos._device import Device, _index, cuda_function, needs_cuda_backing, on_cuda

_CUDA_DEVICE_TYPE = 1  # c10::DeviceType::CUDA, the device_type code of a torch.cuda.Stream


def _device(device=None) -> torch.device:
    return torch.device(DEVICE_NAME, _index(device))


class _OnFlagos(type):
    """isinstance(x, Stream/Event) is true for torch.Stream/torch.Event objects on flagos.

    PyTorch's stream and event methods accept only exact torch.Stream and
    torch.Event objects, so flagos makes those rather than subclasses.
    """

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls._base) and obj.device.type == DEVICE_NAME


class Stream(metaclass=_OnFlagos):
    """A flagos stream: a torch.Stream on the flagos device."""

    _base = torch.Stream

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:
            return torch.Stream(**kwargs)
        return torch.Stream(device=_device(device), priority=priority)


class ExternalStream(Stream):
    """A flagos stream over a cudaStream_t made outside PyTorch (CUDA backing), like torch.cuda.ExternalStream.

    It is a plain torch.Stream on flagos, so isinstance(x, ExternalStream) holds for every flagos stream.
    """

    def __new__(cls, stream_ptr: int, device: Device = None, **kwargs):
        return get_stream_from_external(stream_ptr, device)


def get_stream_from_external(data_ptr: int, device: Device = None) -> torch.Stream:
    """The flagos stream for a cudaStream_t allocated outside PyTorch (the caller keeps it alive)."""
    idx = _index(device)
    if not on_cuda():
        raise needs_cuda_backing(
            "get_stream_from_external", "it wraps a cudaStream_t, and host backing has no CUDA streams"
        )
    cuda = cuda_function("get_stream_from_external")(data_ptr, idx)
    return torch.Stream(stream_id=cuda.stream_id, device_index=idx, device_type=_C._device_type_code())


def native_stream(s: torch.Stream) -> torch.cuda.Stream:
    """The CUDA stream a flagos stream is on a CUDA backing (the same stream id on the same index)."""
    return torch.cuda.Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=_CUDA_DEVICE_TYPE)


class Event(metaclass=_OnFlagos):
    """A flagos event: a torch.Event on the flagos device (`elapsed_time` needs enable_timing=True)."""

    _base = torch.Event

    def __new__(
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, external: bool = False
    ):
        if external:
            raise NotImplementedError(
                "torch.flagos.Event(external=True): flagos events are torch.Event objects, which have no "
                "external flag; on a CUDA backing record a torch.cuda.Event(external=True) on the capturing stream"
            )
        return torch.Event(device=_device(), enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def current_stream(device=None) -> torch.Stream:
    # What torch.accelerator.current_stream(index) calls once it has checked the index (_index checks it).
    # Not that function itself: Dynamo models it on its stream stack, where a device none of whose streams is
    # there gets the current device's stream. Dynamo compiles this frame on its own after a graph break at a
    # call of it (torch_fl/compile/device_api.py breaks there for another device); the C binding it runs
    # eagerly. Traced calls of torch.flagos.current_stream take device_api's substitute instead.
    return torch._C._accelerator_getStream(_index(device))


def default_stream(device=None) -> torch.Stream:
    # Stream id 0 is a device's default stream, on CUDA and host backing alike.
    return torch.Stream(stream_id=0, device_index=_index(device), device_type=_C._device_type_code())


def set_stream(stream: torch.Stream) -> None:
    if stream is None:
        return
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager that makes `stream` current, as torch.cuda.StreamContext does; None is a no-op.

    Setting a stream also makes its device current; on exit both the stream's
    device and the device current at entry get their previous streams back, so
    the current device is the one at entry again.
    """

    def __init__(self, stream: torch.Stream | None):
        if stream is not None and not isinstance(stream, Stream):
            raise ValueError(f"expected a flagos stream (torch.flagos.Stream) or None, got {stream!r}")
        self.stream = stream
        self.src_prev_stream: torch.Stream | None = None
        self.dst_prev_stream: torch.Stream | None = None

    def __enter__(self):
        if self.stream is None:
            return
        self.src_prev_stream = torch.accelerator.current_stream()
        if self.src_prev_stream.device != self.stream.device:
            self.dst_prev_stream = torch.accelerator.current_stream(self.stream.device_index)
        torch.accelerator.set_stream(self.stream)

    def __exit__(self, *exc):
        if self.stream is None:
            return
        if self.dst_prev_stream is not None:
            torch.accelerator.set_stream(self.dst_prev_stream)
        torch.accelerator.set_stream(self.src_prev_stream)


def stream(stream: torch.Stream | None) -> StreamContext:
    """Make `stream` the current stream of its device inside the block (torch.cuda.stream's contract)."""
    return StreamContext(stream)


def is_current_stream_capturing() -> bool:
    """Whether the current stream is capturing a CUDA graph; host backing never captures."""
    return torch.cuda.is_current_stream_capturing() if on_cuda() else False
