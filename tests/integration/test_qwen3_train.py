"""Qwen3 training on flagos: 10 AdamW steps on one memorisable batch.

Checks: the loss decreases (last < 0.8 x first), no NaN/Inf in any loss or
gradient, every trainable parameter changes, and the loss curve matches the
same run on the native backing device (same seed, same batch) within:
  float32: |flagos - native| <= 1e-4 + 1e-4 * |native| per step;
  bf16 autocast: <= 2e-2 + 1e-2 * |native| per step.

Host backing (CI): tiny Qwen3, native CPU reference in this process. CUDA
backing: native CUDA training cannot run in a process that imported torch_fl
(PyTorch issue 161129), so the reference runs in a child process
(torch_fl.models.native_reference); Qwen3-0.6B is marked `cuda`.
"""

from __future__ import annotations

import math

import pytest
import torch

import torch_fl
from torch_fl.models import native_reference, qwen3, workloads

pytest.importorskip("transformers")

ON_CUDA = torch_fl.backing() == "cuda"
NATIVE = "cuda" if ON_CUDA else "cpu"
STEPS, BATCH, LENGTH = 10, 2, 32
TOL = {None: (1e-4, 1e-4), "bfloat16": (2e-2, 1e-2)}  # (atol, rtol) on each step's loss
LR = {"tiny": 1e-3, "0.6b": 1e-4}

CASES = [
    pytest.param("tiny", None, id="tiny-fp32", marks=pytest.mark.anyplatform),
    pytest.param("tiny", "bfloat16", id="tiny-bf16-autocast", marks=pytest.mark.anyplatform),
]
for _amp in (None, "bfloat16"):
    CASES.append(
        pytest.param(
            "0.6b",
            _amp,
            id=f"0.6b-{'bf16-autocast' if _amp else 'fp32'}",
            marks=[pytest.mark.cuda, pytest.mark.skipif(not ON_CUDA, reason="Qwen3-0.6B runs on a CUDA backing")],
        )
    )


def _native_reference(variant, amp):
    if not ON_CUDA:  # native CPU autograd is unaffected by torch_fl: run it here
        model = qwen3.build(variant, seed=0)
        ids = qwen3.tokens(model.config.vocab_size, BATCH, LENGTH, seed=1)
        return workloads.train(model, ids, STEPS, LR[variant], getattr(torch, amp) if amp else None)
    out = native_reference.train(
        variant, NATIVE, seed=0, batch=BATCH, length=LENGTH, token_seed=1, steps=STEPS, lr=LR[variant], amp_dtype=amp
    )
    assert out["torch_fl_imported"] is False
    return out


@pytest.mark.parametrize("variant,amp", CASES)
def test_training(variant, amp):
    model = qwen3.build(variant, seed=0)
    ids = qwen3.tokens(model.config.vocab_size, BATCH, LENGTH, seed=1)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    model.to("flagos")
    assert all(p.device.type == "flagos" for p in model.parameters())

    out = workloads.train(model, ids.to("flagos"), STEPS, LR[variant], getattr(torch, amp) if amp else None)
    losses = out["losses"]

    assert len(losses) == STEPS
    assert out["losses_finite"] and all(math.isfinite(x) for x in losses), losses
    assert out["grads_finite"], "a gradient held NaN or Inf"
    assert out["missing_grads"] == []
    assert losses[-1] < 0.8 * losses[0], f"loss did not go down: {losses}"
    assert out["unchanged"] == [], f"parameters not updated: {out['unchanged']}"
    # and they changed relative to the CPU copy they started from
    moved = {n: not torch.equal(p.detach().cpu(), initial[n]) for n, p in model.named_parameters()}
    assert all(moved.values()), [n for n, m in moved.items() if not m]

    ref = _native_reference(variant, amp)["losses"]
    atol, rtol = TOL[amp]
    diffs = [abs(a - b) for a, b in zip(losses, ref, strict=True)]
    bad = [(i, a, b) for i, (a, b) in enumerate(zip(losses, ref, strict=True)) if abs(a - b) > atol + rtol * abs(b)]
    assert not bad, f"loss curve departs from native {NATIVE} (step, flagos, native): {bad}; max diff {max(diffs)}"


@pytest.mark.anyplatform
def test_reference_child_never_imports_torch_fl():
    out = native_reference.train("tiny", "cpu", steps=2)
    assert out["torch_fl_imported"] is False
    assert len(out["losses"]) == 2 and out["device"] == "cpu"


@pytest.mark.anyplatform
def test_a_checkpoint_trains_on_flagos(tmp_path):
    """A model loaded from a checkpoint switches to training mode and steps on flagos. (transformers turns its
    hub-kernels integration on for checkpoints where the `kernels` package is installed; switching modes then
    re-kernelizes, which raises for device type 'flagos'. qwen3.build loads with it off.)"""
    qwen3.build("tiny", seed=0).save_pretrained(tmp_path)
    model = qwen3.build(str(tmp_path)).to("flagos")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = qwen3.tokens(model.config.vocab_size, 1, 8, seed=1).to("flagos")
    loss = workloads.train_step(model, opt, ids)
    assert math.isfinite(loss)
    assert not getattr(model, "use_kernels", False)
