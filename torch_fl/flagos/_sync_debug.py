"""Sync debug mode: warn or fail on operations that synchronise the device with the host."""

from __future__ import annotations

import torch

from torch_fl.flagos._device import on_cuda

_MODES = {"default": 0, "warn": 1, "error": 2}
# Host backing runs every kernel synchronously, so no operation waits on the device:
# the mode is kept for get_sync_debug_mode and never triggers.
_host_mode = 0


def _mode_number(debug_mode: int | str) -> int:
    if isinstance(debug_mode, str):
        if debug_mode not in _MODES:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        return _MODES[debug_mode]
    if debug_mode not in _MODES.values():
        raise RuntimeError("invalid value of debug_mode, expected one of 0,1,2")
    return int(debug_mode)


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """Same values as torch.cuda's: "default"/0, "warn"/1, "error"/2. On a CUDA backing it is CUDA's mode."""
    global _host_mode
    if on_cuda():
        torch.cuda.set_sync_debug_mode(debug_mode)
    else:
        _host_mode = _mode_number(debug_mode)


def get_sync_debug_mode() -> int:
    return torch.cuda.get_sync_debug_mode() if on_cuda() else _host_mode
