"""The leaf that every torch_fl module imports for the device: its name, the loaded C++ core, and the three
functions over the core that the package exports. It imports nothing of torch_fl but _loader (itself a
leaf), so no import reaches the package's __init__ and no circle can pass through here
(tests/unit/test_package_layout.py checks both)."""

from __future__ import annotations

from torch_fl._loader import DEVICE_NAME, load_core

VERSION = "0.1.0"

_C = load_core()


def backing() -> str:
    """The native device type behind flagos: "cuda" or "cpu" (host memory)."""
    return _C._backing()


def as_native(tensor):
    """View a flagos tensor as a tensor of its backing device (zero copy, same bytes)."""
    return _C.as_native(tensor)


def as_flagos(tensor, index: int = -1):
    """View a backing-device tensor as a flagos tensor (zero copy, same bytes).

    On a CUDA backing the flagos index is the tensor's CUDA index; on host
    backing, `index` picks the virtual device (default: the current one).
    """
    return _C.as_flagos(tensor, index)


__all__ = ["DEVICE_NAME", "VERSION", "_C", "as_flagos", "as_native", "backing"]
