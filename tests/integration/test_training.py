"""Autograd, optimisers, AMP and multi-device on flagos, against CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

pytestmark = pytest.mark.anyplatform


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))


def train(model: nn.Module, device: str, steps: int = 5) -> list[float]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 16, generator=g).to(device)
    y = torch.randint(0, 4, (8,), generator=g).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_module_trained_on_flagos_matches_cpu():
    cpu_model, flagos_model = make_model(), make_model().to("flagos")
    cpu_losses = train(cpu_model, "cpu")
    flagos_losses = train(flagos_model, "flagos")
    assert cpu_losses[-1] < cpu_losses[0]
    torch.testing.assert_close(flagos_losses, cpu_losses, rtol=1e-4, atol=1e-5)
    for p_cpu, p_f in zip(cpu_model.parameters(), flagos_model.parameters(), strict=True):
        assert p_f.device.type == "flagos"
        torch.testing.assert_close(p_f.cpu(), p_cpu, rtol=1e-4, atol=1e-5)


def test_backward_on_the_last_device():
    last = f"flagos:{torch.flagos.device_count() - 1}"
    model = make_model().to(last)
    x = torch.randn(4, 16, device=last, requires_grad=True)
    model(x).square().mean().backward()
    assert x.grad.device == torch.device(last)
    assert all(p.grad is not None and p.grad.device == torch.device(last) for p in model.parameters())


def test_native_cpu_training_still_works_beside_flagos():
    flagos_model = make_model().to("flagos")
    train(flagos_model, "flagos", steps=1)
    cpu_losses = train(make_model(), "cpu")
    assert cpu_losses[-1] < cpu_losses[0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_uses_the_cuda_op_lists(dtype):
    a = torch.randn(8, 8, device="flagos")
    with torch.autocast("flagos", dtype=dtype):
        assert torch.get_autocast_dtype("flagos") == dtype
        assert (a @ a).dtype == dtype  # lower-precision list
        assert F.linear(a, a).dtype == dtype
        assert torch.log_softmax(a.to(dtype), -1).dtype == torch.float32  # fp32 list
        assert torch.cat([a, a.to(dtype)]).dtype == torch.float32  # promote list
        assert (a + a).dtype == torch.float32  # not listed: untouched
    with pytest.raises(RuntimeError, match="unsafe to autocast"):
        with torch.autocast("flagos", dtype=dtype):
            F.binary_cross_entropy(torch.rand(2, device="flagos"), torch.rand(2, device="flagos"))


def test_grad_scaler_scales_and_skips_infinite_steps():
    model = make_model().to("flagos")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("flagos", init_scale=2.0**8)
    x = torch.randn(4, 16, device="flagos")
    with torch.autocast("flagos", dtype=torch.float16):
        loss = model(x).float().square().mean()
    scaler.scale(loss).backward()
    before = [p.detach().clone() for p in model.parameters()]
    scaler.step(opt)
    scaler.update()
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    assert scaler.get_scale() == 2.0**8
    # An infinite gradient: the step is skipped and the scale backs off.
    opt.zero_grad()
    scaler.scale(model(x).square().mean()).backward()
    next(model.parameters()).grad.fill_(float("inf"))
    before = [p.detach().clone() for p in model.parameters()]
    scaler.step(opt)
    scaler.update()
    assert all(torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    assert scaler.get_scale() == 2.0**7


def test_scaled_dot_product_attention_matches_cpu():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 32, generator=g) for _ in range(3))
    fq, fk, fv = (t.to("flagos").requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(fq, fk, fv, is_causal=True)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-5)
    out.sum().backward()
    assert fq.grad.device.type == "flagos" and fq.grad.shape == q.shape
