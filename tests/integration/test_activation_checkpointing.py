"""Activation checkpointing on flagos (torch.utils.checkpoint): the recomputed forward draws the same random
numbers as the first (torch.flagos tells checkpoint that the device is initialised, so it saves and restores
flagos's RNG state), so gradients through dropout equal those without checkpointing."""

from __future__ import annotations

import pytest
import torch
import torch.utils.checkpoint as checkpoint

import torch_fl  # noqa: F401

pytestmark = pytest.mark.anyplatform


@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non_reentrant"])
def test_checkpointed_dropout_gradients_equal_plain_ones(reentrant):
    torch.manual_seed(1)
    lin = torch.nn.Linear(16, 16).to("flagos")
    x = torch.randn(8, 16, device="flagos", requires_grad=True)

    def block(t):
        return torch.nn.functional.dropout(lin(t), 0.5)

    torch.manual_seed(0)
    plain = block(x)
    plain.sum().backward()
    want, x.grad = x.grad.clone(), None
    torch.manual_seed(0)
    out = checkpoint.checkpoint(block, x, use_reentrant=reentrant)
    out.sum().backward()
    torch.testing.assert_close(out, plain, rtol=0, atol=0)
    torch.testing.assert_close(x.grad, want, rtol=0, atol=0)


def test_checkpoint_sees_an_initialised_device():
    torch.empty(1, device="flagos")  # initialises flagos
    assert torch.flagos._initialized is True
