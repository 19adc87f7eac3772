"""cpu_fallback: copy the inputs to the host, run the CPU kernel, copy back.

The last resort for operators the native backend lacks; also routable by
name. `FLAGOS_LOG_FALLBACK=1` logs `[flagos cpu_fallback] aten::<op>`.
"""

from __future__ import annotations

import functools

import torch

from torch_fl.backends.base import Backend
from torch_fl.vocab.ops import aten_ops, makes_views, qualified


class CpuFallbackBackend(Backend):
    name = "cpu_fallback"
    core_route = "cpu_fallback"
    description = "copy storages to host, run PyTorch's CPU kernel, copy written ones back"

    def version(self) -> str | None:
        return f"torch {torch.__version__}"

    @functools.cache  # noqa: B019  (one instance for the process)
    def supported_ops(self) -> frozenset[str]:
        has = torch._C._dispatch_has_computed_kernel_for_dispatch_key
        # Not view operators: the fallback would return a host copy, not a view sharing the input's storage.
        return frozenset(op for op in aten_ops() if has(qualified(op), "CPU") and not makes_views(op))
