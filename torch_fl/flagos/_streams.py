"""Streams and events. On a CUDA backing a flagos stream is a CUDA stream."""

from __future__ import annotations

import contextlib

import torch

from torch_fl._loader import DEVICE_NAME
from torch_fl.flagos._device import _index


def _device(device=None) -> torch.device:
    return torch.device(DEVICE_NAME, _index(device))


class Stream(torch.Stream):
    """A flagos stream (torch.Stream on the flagos device)."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=_device(device), priority=priority)

    def __repr__(self):
        return f"<torch.flagos.Stream device={self.device} stream_id={self.stream_id}>"


class Event(torch.Event):
    """A flagos event; `elapsed_time` needs `enable_timing=True` on both events."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return super().__new__(
            cls, device=_device(), enable_timing=enable_timing, blocking=blocking, interprocess=interprocess
        )


def _as_flagos_stream(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device=None) -> Stream:
    return _as_flagos_stream(torch.accelerator.current_stream(_index(device)))


def default_stream(device=None) -> Stream:
    idx = _index(device)
    # stream id 0 is the default stream of a device for CUDA and host backing alike.
    return Stream(stream_id=0, device_index=idx, device_type=torch.device(DEVICE_NAME).type)


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
