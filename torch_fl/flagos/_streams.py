"""Streams and events. On a CUDA backing a flagos stream is a CUDA stream."""

from __future__ import annotations

import contextlib

import torch

from torch_fl import _C
from torch_fl._loader import DEVICE_NAME
from torch_fl.flagos._device import _index


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


class Event(metaclass=_OnFlagos):
    """A flagos event: a torch.Event on the flagos device (`elapsed_time` needs enable_timing=True)."""

    _base = torch.Event

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return torch.Event(device=_device(), enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def current_stream(device=None) -> torch.Stream:
    return torch.accelerator.current_stream(_index(device))


def default_stream(device=None) -> torch.Stream:
    # Stream id 0 is a device's default stream, on CUDA and host backing alike.
    return torch.Stream(stream_id=0, device_index=_index(device), device_type=_C._device_type_code())


def set_stream(s: torch.Stream) -> None:
    if s is None:
        return
    torch.accelerator.set_stream(s)


@contextlib.contextmanager
def stream(s: torch.Stream | None):
    """Make `s` the current stream of its device inside the block."""
    if s is None:
        yield
        return
    prev = torch.accelerator.current_stream(s.device_index)
    torch.accelerator.set_stream(s)
    try:
        yield
    finally:
        torch.accelerator.set_stream(prev)
