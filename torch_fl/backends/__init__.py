"""The backends an operator can be routed to, by the names configs use.

| name (as written)                  | backend                                         | stats name        |
| ---------------------------------- | ----------------------------------------------- | ----------------- |
| `cuda`, `cpu`, `native`            | native route (`cuda` / `cpu` on that backing)   | `native`          |
| `flaggems`                         | FlagGems kernels, replayed from C++ (replay)    | `flaggems`        |
| `flaggems_python`, `flagos_python` | FlagGems kernels through its Python functions   | `flaggems_python` |
| `cpu_fallback`                     | copy to host, CPU kernel, copy back             | `cpu_fallback`    |
| `ascend`                           | Ascend ACLNN (planned, unavailable)             | `ascend`          |

The dispatch log prints FEP 0025's names (`log_name`): the backing device's
(`cuda`, `cpu`) for the native route, `flagos_python` for FlagGems' Python
functions, other backends as named.
"""

from __future__ import annotations

from torch_fl._core import backing
from torch_fl.backends.ascend import AscendBackend
from torch_fl.backends.base import Backend, BackendKernel
from torch_fl.backends.cpu_fallback import CpuFallbackBackend
from torch_fl.backends.flaggems import FlagGemsBackend
from torch_fl.backends.native import NativeBackend

_FLAGGEMS_PYTHON = FlagGemsBackend("flaggems_python", replay=False)

#: every accepted backend name -> its backend
BACKENDS: dict[str, Backend] = {
    "native": NativeBackend("native", None),
    "cuda": NativeBackend("cuda", "cuda"),
    "cpu": NativeBackend("cpu", "cpu"),
    "flaggems": FlagGemsBackend("flaggems", replay=True),
    "flaggems_python": _FLAGGEMS_PYTHON,
    "flagos_python": _FLAGGEMS_PYTHON,
    "cpu_fallback": CpuFallbackBackend(),
    "ascend": AscendBackend(),
}

NAMES = tuple(BACKENDS)


def get(name: str) -> Backend:
    """The backend a config name denotes; KeyError for unknown names."""
    return BACKENDS[name]


def stats_name(name: str) -> str:
    """The name stats use: native aliases are all `native`, `flagos_python` is `flaggems_python`."""
    b = BACKENDS[name]
    return "native" if b.native else b.name


def log_name(name: str) -> str:
    """The name the dispatch log prints for a backend (FEP 0025's): the backing device's for the native
    route, `flagos_python` for FlagGems' Python functions, else the name itself."""
    b = BACKENDS[name]
    if b.native:
        return backing()
    return "flagos_python" if b is _FLAGGEMS_PYTHON else name


def unique() -> list[Backend]:
    """Each backend once (aliases folded), in table order."""
    seen, out = set(), []
    for b in BACKENDS.values():
        if id(b) not in seen:
            seen.add(id(b))
            out.append(b)
    return out


__all__ = ["BACKENDS", "NAMES", "Backend", "BackendKernel", "get", "log_name", "stats_name", "unique"]
