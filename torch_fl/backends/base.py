"""What every backend states: availability, version, supported ops and dtypes, kernels."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class BackendKernel:
    """A backend's function for one operator: called like the aten operator on native (backing-device)
    aliases of the flagos arguments, returning native results, as a FlagGems function does."""

    fn: Callable


class Backend:
    """One place an operator can run.

    `name` is the canonical backend name used in stats; the config may also
    name it through an alias (kept for the dispatch log).
    """

    name: str = ""
    description: str = ""
    #: runs through the C++ native route (no Python kernel needed)
    native: bool = False
    #: the C++ core runs this backend's kernels itself: "cpu_fallback" (PyTorch's CPU fallback); None: `kernel()`
    core_route: str | None = None
    #: kernels run once per input signature, recorded, and replay in C++ afterwards (torch_fl/replay)
    replay: bool = False
    #: Set (to why) for a backend whose kernels must not see empty tensors: a
    #: call with an empty input runs natively instead, counted as a fallback
    empty_inputs_unsafe: str | None = None

    def available(self) -> bool:
        return self.unavailable_reason() is None

    def unavailable_reason(self) -> str | None:
        """None when usable; else why not and what to do."""
        return None

    def version(self) -> str | None:
        return None

    def supported_ops(self) -> frozenset[str] | None:
        """The operators this backend has kernels for; None means every operator."""
        return None

    def supports_op(self, op: str) -> bool:
        ops = self.supported_ops()
        return ops is None or op in ops

    def unsupported_dtypes(self) -> frozenset[torch.dtype]:
        """Dtypes this backend does not handle for any operator."""
        return frozenset()

    def supports_dtype(self, op: str, dtype: torch.dtype | None) -> bool:
        return dtype is None or dtype not in self.unsupported_dtypes()

    def kernel(self, op: str) -> BackendKernel:
        """The backend's function for `op`."""
        raise NotImplementedError(f"backend {self.name} has no kernel for {op}")

    def info(self) -> dict:
        ops = self.supported_ops() if self.available() else None
        return {
            "name": self.name,
            "available": self.available(),
            "reason": self.unavailable_reason(),
            "version": self.version(),
            "ops": "all" if ops is None and self.available() else (len(ops) if ops is not None else None),
            "description": self.description,
        }
