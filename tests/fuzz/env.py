"""What a fuzz program's steps are made of, and the environment one runs in.

Steps name their arguments through small markers (`V(i)` for variable `t{i}`, `DT`, `Dev`, `MF` for a dtype,
a logical device and a memory format by name) so that a program prints as the Python that builds it; `fmt`
renders an argument as the torch code it stands for. `Env` holds a run's variables and resolves the markers:
on flagos to the devices they name, on the reference run every device to the CPU (or, to ask what CUDA's own
kernels do, the flagos devices to the GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

# ----------------------------------------------------------------------------------------------- markers


@dataclass(frozen=True)
class V:
    """Variable `t{i}` as an argument."""

    i: int

    def __repr__(self) -> str:
        return f"V({self.i})"


@dataclass(frozen=True)
class DT:
    """A dtype by name (`DT('float32')` is torch.float32)."""

    name: str

    def __repr__(self) -> str:
        return f"DT({self.name!r})"


@dataclass(frozen=True)
class Dev:
    """A logical device: d0, d1, cpu, cur."""

    name: str

    def __repr__(self) -> str:
        return f"Dev({self.name!r})"


@dataclass(frozen=True)
class MF:
    """A memory format by name (`MF('contiguous_format')`)."""

    name: str

    def __repr__(self) -> str:
        return f"MF({self.name!r})"


DEV_CODE = {"d0": "D0", "d1": "D1", "cpu": "CPU", "cur": "CUR"}
#: what the rendered code's device names stand for on flagos
PRELUDE = (
    "import torch, torch_fl\n"
    "from torch_fl import routing\n"
    "from tests.fuzz.programs import ints\n"
    "D0, D1, CPU, CUR = torch.device('flagos', 0), torch.device('flagos', 1), torch.device('cpu'), "
    "torch.device('flagos')"
)


def fmt(x: Any) -> str:
    """`x` (an argument) as the Python of the rendered program."""
    if isinstance(x, V):
        return f"t{x.i}"
    if isinstance(x, (DT, MF)):
        return f"torch.{x.name}"
    if isinstance(x, Dev):
        return DEV_CODE[x.name]
    if x is Ellipsis:
        return "..."
    if isinstance(x, slice):
        parts = ["" if p is None else str(p) for p in (x.start, x.stop, x.step)]
        return ":".join(parts[:2]) + (f":{parts[2]}" if x.step is not None else "")
    if isinstance(x, tuple):
        return "(" + ", ".join(fmt(a) for a in x) + ("," if len(x) == 1 else "") + ")"
    if isinstance(x, list):
        return "[" + ", ".join(fmt(a) for a in x) + "]"
    return repr(x)


def call_args(args: tuple, kwargs: dict) -> str:
    return ", ".join([fmt(a) for a in args] + [f"{k}={fmt(v)}" for k, v in kwargs.items()])


def refs_in(x: Any) -> list[int]:
    if isinstance(x, V):
        return [x.i]
    if isinstance(x, (list, tuple)):
        return [i for a in x for i in refs_in(a)]
    if isinstance(x, dict):
        return [i for a in x.values() for i in refs_in(a)]
    return []


def first_device(x: Any) -> Any:
    if isinstance(x, (V, Dev)):
        return x
    if isinstance(x, (list, tuple)):
        for a in x:
            d = first_device(a)
            if d is not None:
                return d
    return None


def ints(shape, dtype, seed: int) -> torch.Tensor:
    """Small integers (exact in every dtype) on the CPU: 0/1 for bool, 0..5 for uint8, -4..4 otherwise."""
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    lo, hi = (0, 2) if dtype == torch.bool else (0, 6) if dtype == torch.uint8 else (-4, 5)
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, tuple(shape), generator=g).to(dtype)


# ----------------------------------------------------------------------------------------------- environment


class Env:
    """Variables of a run: tensors, their logical devices, the current flagos device, routes set."""

    def __init__(self, flagos: bool, native: str = "cpu"):
        self.flagos = flagos
        self.native = torch.device(native)  # where a reference run puts the flagos devices' tensors
        self.t: dict[int, torch.Tensor] = {}
        self.dev: dict[int, str] = {}
        self.current = 0
        self.routed: set[str] = set()
        self.inference = None  # the torch.inference_mode() entered by an InferenceMode step
        if flagos:
            self.saved_device = torch.flagos.current_device()
            torch.flagos.set_device(0)

    def logical(self, name: str) -> str:
        return f"d{self.current}" if name == "cur" else name

    def device(self, name: str) -> torch.device:
        if name == "cpu":
            return torch.device("cpu")
        if not self.flagos:
            return self.native
        return torch.device("flagos") if name == "cur" else torch.device("flagos", int(name[1]))

    def value(self, x: Any) -> Any:
        if isinstance(x, V):
            return self.t[x.i]
        if isinstance(x, (DT, MF)):
            return getattr(torch, x.name)
        if isinstance(x, Dev):
            return self.device(x.name)
        if isinstance(x, tuple):
            return tuple(self.value(a) for a in x)
        if isinstance(x, list):
            return [self.value(a) for a in x]
        return x

    def dev_of(self, x: Any) -> str:
        """Logical device of a result whose device comes from `x` (a V or a Dev)."""
        if isinstance(x, V):
            return self.dev[x.i]
        if isinstance(x, Dev):
            return self.logical(x.name)
        return "cpu"

    def close(self) -> None:
        if self.inference is not None:
            self.inference.__exit__(None, None, None)
            self.inference = None
        if self.flagos:
            from torch_fl import routing

            for op in sorted(self.routed):
                routing.clear_route(op)
            self.routed.clear()
            torch.flagos.set_device(self.saved_device)


def logical_device(t: torch.Tensor) -> str:
    return "cpu" if t.device.type == "cpu" else f"d{t.device.index}"


def storage_key(t: torch.Tensor) -> int:
    """The identity of `t`'s storage (tensors with the same key share memory)."""
    return t.untyped_storage()._cdata
