"""The native route: PyTorch's own kernels of the backing device, zero copy.

`cuda` names it on a CUDA backing, `cpu` on host backing, and `native` on
either. The route itself is the C++ boxed kernel of the core; routing an
operator here removes any Python override so that kernel runs again.
"""

from __future__ import annotations

import torch

from torch_fl._core import backing
from torch_fl.backends.base import Backend


class NativeBackend(Backend):
    native = True

    def __init__(self, name: str, platform: str | None):
        self.name = name
        self.platform = platform  # None: whatever backs flagos
        where = platform or "backing-device"
        self.description = f"PyTorch's own {where} kernels on the same memory (zero copy)"

    def unavailable_reason(self) -> str | None:
        kind = backing()
        if self.platform is not None and self.platform != kind:
            return (
                f"'{self.name}' is the native route of a {self.platform} backing, but flagos is backed by {kind}; "
                f"write '{kind}' or 'native' instead"
            )
        return None

    def version(self) -> str | None:
        if backing() == "cuda":
            return f"torch {torch.__version__} (CUDA {torch.version.cuda or torch.version.hip})"
        return f"torch {torch.__version__}"
