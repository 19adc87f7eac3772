"""Loads the C++ core and registers the flagos device with PyTorch. A leaf: it imports nothing of torch_fl
but the compiled core and its build record.

Everything that can go wrong at import is checked here, before the compiled
core touches PyTorch's registries, so that each problem is reported as an
error that names its cause and fix instead of a crash.
"""

from __future__ import annotations

import atexit
import os
import sys

import torch

DEVICE_NAME = "flagos"
_DEFAULT_PRIVATEUSE1_NAME = "privateuseone"
_ACCELERATORS = ("auto", "cuda", "cpu")
# How long exit waits for an autograd device thread to finish the task it was running.
_AUTOGRAD_EXIT_WAIT_S = 10.0
_REBUILD = "pip install --no-build-isolation -e .  (from the torch_fl source folder)"


class FlagosInitError(RuntimeError):
    """The flagos device could not be set up in this process."""


def _check_privateuse1_is_free() -> None:
    owner = torch._C._get_privateuse1_backend_name()
    if owner not in (_DEFAULT_PRIVATEUSE1_NAME, DEVICE_NAME):
        hint = " (torch_npu names it 'npu')" if owner == "npu" else ""
        raise FlagosInitError(
            f"PyTorch's PrivateUse1 device slot already belongs to '{owner}'{hint}; flagos needs that slot and "
            "PyTorch has only one. Import torch_fl in a process that does not import that package."
        )


def _check_build_matches_torch() -> None:
    try:
        from torch_fl._build_info import TORCH_VERSION
    except ImportError as e:
        raise ImportError(f"torch_fl's compiled core is missing; build it with: {_REBUILD}") from e
    if TORCH_VERSION != torch.__version__:
        raise ImportError(
            f"torch_fl's compiled core was built against torch {TORCH_VERSION}, but torch {torch.__version__} is "
            f"running. Rebuild it against this torch: {_REBUILD}"
        )


def load_core():
    """The compiled core, once the checks that must precede it pass (torch_fl._core holds it)."""
    _check_privateuse1_is_free()
    _check_build_matches_torch()
    try:
        from torch_fl import _C
    except ImportError as e:
        msg = str(e)
        if "undefined symbol" in msg or "cannot open shared object" in msg:
            raise ImportError(
                f"torch_fl's compiled core does not match the installed torch {torch.__version__} ({msg}). "
                f"Rebuild it: {_REBUILD}"
            ) from e
        raise
    return _C


def _choose_backing() -> str:
    requested = os.environ.get("FLAGOS_ACCELERATOR", "auto").strip().lower() or "auto"
    if requested not in _ACCELERATORS:
        raise FlagosInitError(
            f"FLAGOS_ACCELERATOR={requested!r} is not a known backing; use one of {', '.join(_ACCELERATORS)} "
            "(auto = cuda when a GPU is usable, else host memory)."
        )
    cuda_ok = torch.cuda.is_available()
    if requested == "cuda" and not cuda_ok:
        built = torch.version.cuda
        why = "this PyTorch is a CPU-only build" if built is None else "no CUDA device is visible"
        raise FlagosInitError(
            f"FLAGOS_ACCELERATOR=cuda, but {why}. Unset it (auto) or set FLAGOS_ACCELERATOR=cpu to back flagos "
            "with host memory."
        )
    if requested == "auto":
        return "cuda" if cuda_ok else "cpu"
    return requested


def _host_devices() -> int:
    raw = os.environ.get("FLAGOS_HOST_DEVICES", "1").strip()
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if not 1 <= n <= 64:
        raise FlagosInitError(f"FLAGOS_HOST_DEVICES={raw!r} must be a whole number from 1 to 64.")
    return n


# A forked child has its parent's autograd queues but none of the threads behind them: nothing to wait for (one
# that runs a backward itself gets new threads from torch, which exit does not drain).
_forked_child = False


def _note_fork() -> None:
    global _forked_child
    _forked_child = True


def _drain_autograd_threads(core) -> None:
    """At exit, while the interpreter is whole: let each autograd device thread release the backward task it
    ran (it may hold Python objects, and dropping one during finalization aborts the process; see
    csrc/runtime/autograd_threads.h)."""
    if _forked_child:
        return
    busy = core._drain_autograd_threads(_AUTOGRAD_EXIT_WAIT_S)
    if busy:
        print(
            f"torch_fl: {busy} autograd device thread(s) still running a backward {_AUTOGRAD_EXIT_WAIT_S:.0f} s "
            "into interpreter exit (a backward on a daemon thread?); the process may abort if one releases a "
            "Python object now. Join threads that run backward before exiting.",
            file=sys.stderr,
        )


def initialize(core) -> bool:
    """Register the flagos device with PyTorch once per process (torch_fl/__init__.py calls it); whether this
    call did (a reload of the package finds it done)."""
    _check_privateuse1_is_free()
    accelerator = _choose_backing()
    host_devices = _host_devices()
    if core._initialized():
        return False
    torch.utils.rename_privateuse1_backend(DEVICE_NAME)
    try:
        core._init(accelerator, host_devices)
    except RuntimeError as e:
        raise FlagosInitError(str(e)) from e
    # Registered after torch's own atexit handlers, so it runs before them and after any registered later.
    atexit.register(_drain_autograd_threads, core)
    os.register_at_fork(after_in_child=_note_fork)
    # The dispatch log names the native route after the platform, as in FEP 0025.
    core._set_default_native_label(accelerator)
    # FLAGOS_LOG_DISPATCH, FLAGOS_LOG_FALLBACK and FLAGOS_STRICT are read by torch_fl.routing at import.
    return True
