"""flaggems / flaggems_python (alias flagos_python): FlagGems Triton kernels.

The aten-overload -> function table is FlagGems' own: `flag_gems.enable(lib=...)`
walks its `_FULL_CONFIG` (applying its version conditions, vendor exclusions
and C++-patched ops) and calls `lib.impl(op, fn, key)` for each operator it
would register. We hand it a recorder instead of a `torch.library.Library`, so
the table is exactly what `flag_gems.enable()` registers for this install,
without touching the CUDA dispatch key.

A kernel is the FlagGems function itself (`BackendKernel(fn)`):
routing hands it to the C++ core, which calls it on native CUDA aliases of the
flagos arguments (zero copy), on the arguments' CUDA device (flagos streams
are CUDA streams, so FlagGems launches on the current flagos stream), and
hands back its results as flagos tensors.

flag_gems cannot be imported without a GPU: on host backing this backend
reports itself unavailable and routes to it fall back (see docs/routing.md).
`flaggems` and `flaggems_python` run the same table two ways (FEP 0025's
names): `flaggems_python` calls FlagGems' Python function on every call;
`flaggems` (the low-overhead path) calls it once per input signature under a
recorder and replays what it launched from C++ afterwards
(torch_fl/replay).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys

import torch

from torch_fl._core import backing
from torch_fl.backends.base import Backend, BackendKernel
from torch_fl.backends.flaggems_defects import guarded
from torch_fl.replay import install as install_recorder
from torch_fl.vocab.errors import RoutingError
from torch_fl.vocab.ops import normalize

_COMPLEX = frozenset({torch.complex32, torch.complex64, torch.complex128})
SOURCE_DIR_ENV = "FLAGGEMS_SOURCE_DIR"


class _Recorder:
    """Stands in for torch.library.Library when FlagGems registers its ops."""

    def __init__(self):
        self.table: dict[str, object] = {}

    def impl(self, op_name, fn, dispatch_key="", *args, **kwargs):
        self.table[normalize(op_name)] = fn

    def _destroy(self):
        pass


def build_table(module) -> dict[str, object]:
    """aten overload -> FlagGems function, from FlagGems' own registration."""
    rec = _Recorder()
    enable = getattr(module, "enable", None)
    if enable is not None:
        enable(lib=rec)
    if not rec.table and hasattr(module, "_FULL_CONFIG"):
        # An enable() that did not register through `lib`: walk its table the way its registrar does.
        for item in module._FULL_CONFIG:
            if len(item) > 2 and not item[2]():
                continue
            rec.impl(item[0], item[1])
    if not rec.table:
        raise RuntimeError("flag_gems registered no operators through enable(lib=...) and has no _FULL_CONFIG")
    return rec.table


def source_dir() -> str | None:
    """The sys.path entry FLAGGEMS_SOURCE_DIR asks for; raises on a path without FlagGems."""
    raw = os.environ.get(SOURCE_DIR_ENV, "").strip()
    if not raw:
        return None
    # A checkout (src/flag_gems), the folder holding the package, or the package
    # folder itself: importing flag_gems sets this variable to its own package
    # folder, so child processes of a FlagGems user inherit that form.
    for cand in (os.path.join(raw, "src"), raw, os.path.dirname(os.path.normpath(raw))):
        if os.path.isfile(os.path.join(cand, "flag_gems", "__init__.py")):
            return os.path.abspath(cand)
    raise RoutingError(
        f"{SOURCE_DIR_ENV}={raw!r} holds no FlagGems source (looked for src/flag_gems/__init__.py, "
        "flag_gems/__init__.py and __init__.py of a flag_gems folder). Point it at a FlagGems checkout, "
        "or unset it to use the installed flag_gems."
    )


class _Loader:
    """Imports flag_gems once, on first need, and keeps its table."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.loaded = False
        self.module = None
        self.table: dict[str, object] = {}
        self.reason: str | None = None
        self.allow_host = False

    def use_module(self, module, allow_host: bool = True):
        """Use `module` as flag_gems (tests inject a fake with the same registration table shape)."""
        self.reset()
        self.allow_host = allow_host
        self._adopt(module)

    def load(self):
        if self.loaded:
            return
        self.loaded = True
        if backing() != "cuda":
            self.reason = "flagos is backed by host memory (no GPU here); FlagGems needs a GPU that Triton supports"
            return
        path = source_dir()
        if path is not None and path not in sys.path:
            sys.path.insert(0, path)
        try:
            module = importlib.import_module("flag_gems")
        except Exception as e:  # noqa: BLE001  (any import failure means unavailable, with its reason)
            self.reason = (
                f"import flag_gems failed ({type(e).__name__}: {e}); install it (pip install flag-gems) "
                f"or set {SOURCE_DIR_ENV} to a FlagGems checkout"
            )
            return
        self._adopt(module)

    def _adopt(self, module):
        self.loaded = True
        try:
            table = build_table(module)
        except Exception as e:  # noqa: BLE001
            self.reason = f"could not read FlagGems' registration table ({type(e).__name__}: {e})"
            return
        self.module = module
        self.table = {op: guarded(fn, op) for op, fn in table.items()}  # bad calls refused before they run
        self.reason = None

    def version(self) -> str | None:
        if self.module is not None:
            return getattr(self.module, "__version__", None)
        try:
            return importlib.metadata.version("flag-gems") + " (installed, not loaded)"
        except importlib.metadata.PackageNotFoundError:
            return None


LOADER = _Loader()


class FlagGemsBackend(Backend):
    description = "FlagGems Triton kernels on the same memory"
    # An empty input has no work to speed up, and FlagGems 5.0.2 is not safe
    # on it: its Hopper mm faults the GPU (illegal memory access, during
    # autotuning) when M or K is 0, which no fallback can recover from; all
    # raises ZeroDivisionError and bmm a math domain error (docs/routing.md).
    empty_inputs_unsafe = "FlagGems 5.0.2 faults or raises on some; see docs/routing.md, Fallback rules"

    def __init__(self, name: str, replay: bool):
        self.name = name
        self.replay = replay
        if replay:
            install_recorder()

    def unavailable_reason(self) -> str | None:
        LOADER.load()
        return LOADER.reason

    def version(self) -> str | None:
        return LOADER.version()

    def supported_ops(self) -> frozenset[str]:
        LOADER.load()
        return frozenset(LOADER.table)

    def unsupported_dtypes(self) -> frozenset[torch.dtype]:
        return _COMPLEX  # Triton has no complex types

    def kernel(self, op: str) -> BackendKernel:
        LOADER.load()
        fn = LOADER.table.get(op)
        if fn is None:
            raise NotImplementedError(f"FlagGems has no kernel for {op}")
        return BackendKernel(fn)
