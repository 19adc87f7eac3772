"""A clear error for native CUDA backward in a process that registered flagos (PyTorch issue 161129).

PyTorch makes a registered PrivateUse1 device its one accelerator (`at::getAccelerator()`), and its
autograd engine then looks up a node's stream only on that device type: a backward over CUDA tensors
fails inside the engine with `opt_ready_stream && opt_parent_stream INTERNAL ASSERT FAILED`, which names
neither the cause nor a fix. No plugin can change the lookup (docs/integrations.md). On a CUDA backing
`install()` wraps the engine's Python entry, `torch.autograd.graph._engine_run_backward` (which
`Tensor.backward`, `torch.autograd.backward` and `torch.autograd.grad` call; torch.compiler wraps the
same two names the same way), so that this one failure raises a RuntimeError that says why and what to
do, chained to the engine's. Every other error and every result pass through untouched.
"""

from __future__ import annotations

import functools

import torch.autograd
import torch.autograd.graph

_ENGINE_ASSERT = "opt_ready_stream && opt_parent_stream"

MESSAGE = (
    "backward over CUDA tensors cannot run in a process that imported torch_fl: PyTorch makes the "
    "registered flagos device its accelerator, and its autograd engine then finds streams only for flagos "
    "tensors (PyTorch issue 161129). Train on flagos instead, which runs CUDA's kernels on the same GPU "
    "(model.to('flagos'); for Hugging Face Trainer, accelerate and TRL call torch_fl.integrations.enable() "
    "first), or run native CUDA training in a process that does not import torch_fl."
)


def _explained(run_backward):
    @functools.wraps(run_backward)
    def engine_run_backward(*args, **kwargs):
        try:
            return run_backward(*args, **kwargs)
        except RuntimeError as error:
            if _ENGINE_ASSERT in str(error):
                raise RuntimeError(MESSAGE) from error
            raise

    engine_run_backward._flagos_explained = True
    return engine_run_backward


def install() -> None:
    """Wrap the engine's entry once (idempotent)."""
    current = torch.autograd.graph._engine_run_backward
    if getattr(current, "_flagos_explained", False):
        return
    wrapped = _explained(current)
    torch.autograd.graph._engine_run_backward = wrapped
    torch.autograd._engine_run_backward = wrapped
