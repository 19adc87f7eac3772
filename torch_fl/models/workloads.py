"""The workloads the tests, the demo and the benchmark run: greedy decoding,
a forward pass, and AdamW training steps, on any device type.

Imports only torch (never torch_fl), so native reference processes can load
it by path; see qwen3.py.
"""

from __future__ import annotations

import contextlib
import inspect
import math

import torch

# How close flagos's last-position logits must be to native's (compared in
# float32; docs/verification.md section 6). With native routes they are
# bit-identical; the room is for routes to other kernels (FlagGems), which
# round differently, without hiding real errors (logits span several units).
# float16 takes bfloat16's, the looser of the two.
LOGITS_TOLERANCE = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.bfloat16: dict(rtol=1.6e-2, atol=5e-2),
    torch.float16: dict(rtol=1.6e-2, atol=5e-2),
}


def device_module(device):
    """torch.cuda / torch.flagos / torch.cpu for a device."""
    return getattr(torch, torch.device(device).type)


def synchronize(device) -> None:
    device = torch.device(device)
    if device.type != "cpu":
        device_module(device).synchronize(device)


def reset_peak_memory(device) -> None:
    device = torch.device(device)
    if device.type != "cpu":
        module = device_module(device)
        module.init()  # torch.cuda refuses to reset stats before its lazy init ('Invalid device argument')
        module.reset_peak_memory_stats(device)


def peak_memory(device) -> int | None:
    """Peak bytes allocated on the device since the last reset (None on plain CPU)."""
    device = torch.device(device)
    if device.type == "cpu":
        return None
    return int(device_module(device).max_memory_allocated(device))


def autocast(device, dtype: torch.dtype | None):
    """autocast for the device type, or nothing when dtype is None."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


@torch.no_grad()
def greedy(model, input_ids: torch.Tensor, new_tokens: int, streamer=None) -> torch.Tensor:
    """Greedy generation of exactly `new_tokens` tokens; returns prompt + new tokens."""
    return model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        streamer=streamer,
    )


@torch.no_grad()
def greedy_steps(model, input_ids: torch.Tensor, new_tokens: int):
    """greedy() one token at a time: a generator that yields after each token.

    Runs the forward calls generate() makes (the prompt, then one token at a
    time on a DynamicCache, the attention mask grown by one each step) without
    generate()'s own bookkeeping, so that a benchmark can alternate two models
    token by token in one thread. Its return value (StopIteration.value) is
    prompt + new tokens, the same as greedy()'s.
    """
    from transformers import DynamicCache

    params = inspect.signature(model.forward).parameters
    cache_arg = "cache" if "cache" in params else "past_key_values"  # renamed in transformers 5.x
    cache = DynamicCache(config=model.config)
    mask = torch.ones_like(input_ids)
    positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
    step_ids, generated = input_ids, []
    for _ in range(new_tokens):
        logits = model(
            input_ids=step_ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{cache_arg: cache},
        ).logits
        step_ids = logits[:, -1].argmax(-1, keepdim=True)
        generated.append(step_ids)
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], -1)
        positions = positions[:, -1:] + 1
        yield
    return torch.cat([input_ids, *generated], -1)


def run_steps(steps) -> torch.Tensor:
    """Runs a greedy_steps() generator to its end and returns its tokens."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


@torch.no_grad()
def sample(model, input_ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Multinomial sampling (uses the device's RNG)."""
    return model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=True,
        top_k=0,
        top_p=1.0,
        temperature=1.0,
    )


@torch.no_grad()
def last_logits(model, input_ids: torch.Tensor) -> torch.Tensor:
    """Float32 logits at the last position, on the CPU."""
    return model(input_ids=input_ids, use_cache=False).logits[:, -1].float().cpu()


def train_step(model, opt, input_ids: torch.Tensor, amp_dtype=torch.bfloat16) -> torch.Tensor:
    """One step on one batch (labels = inputs) under autocast: zero_grad, forward, backward, `opt.step()`.
    Returns the loss detached, without reading it (no host synchronisation)."""
    opt.zero_grad(set_to_none=True)
    with autocast(input_ids.device, amp_dtype):
        loss = model(input_ids=input_ids, labels=input_ids).loss
    loss.backward()
    opt.step()
    return loss.detach()


def train(model, input_ids: torch.Tensor, steps: int = 10, lr: float = 1e-3, amp_dtype=None) -> dict:
    """`steps` AdamW steps on one batch (labels = inputs), checking every step.

    Returns losses per step (float), whether every loss and every gradient was
    finite, and the names of trainable parameters that did not change.
    """
    device = input_ids.device
    model.train()
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    before = {n: p.detach().clone() for n, p in params.items()}
    opt = torch.optim.AdamW(params.values(), lr=lr, weight_decay=0.0)
    losses, grads_finite, missing_grads = [], True, set()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with autocast(device, amp_dtype):
            loss = model(input_ids=input_ids, labels=input_ids).loss
        loss.backward()
        grads = []
        for n, p in params.items():
            if p.grad is None:
                missing_grads.add(n)
            else:
                grads.append(p.grad.detach().isfinite().all())
        grads_finite = grads_finite and bool(torch.stack(grads).all().item())
        opt.step()
        losses.append(float(loss.detach().float().item()))
    unchanged = [n for n, p in params.items() if torch.equal(p.detach(), before[n])]
    model.eval()
    return {
        "losses": losses,
        "losses_finite": all(math.isfinite(x) for x in losses),
        "grads_finite": grads_finite,
        "missing_grads": sorted(missing_grads),
        "unchanged": unchanged,
        "trainable": len(params),
    }
