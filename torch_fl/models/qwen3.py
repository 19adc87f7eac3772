"""Qwen3 models built locally: the Qwen3-0.6B architecture, a tiny variant, or a local checkpoint.

Nothing is downloaded. Random weights come from a seed and are always
initialised on the CPU, so every copy built with the same seed (the flagos
model, the native reference, a child process) holds identical bytes.

This module imports only torch and transformers, never torch_fl: the native
reference workers (torch_fl.models.native_reference, benchmarks/e2e.py) load
it by path in processes that must not register the flagos device.
"""

from __future__ import annotations

import os

import torch

# The Qwen3-0.6B architecture (its config.json), without the weights.
QWEN3_0_6B = dict(
    vocab_size=151936,
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    hidden_act="silu",
    rms_norm_eps=1e-6,
    rope_theta=1_000_000.0,
    tie_word_embeddings=True,
    max_position_embeddings=40960,
    attention_bias=False,
    attention_dropout=0.0,
    use_sliding_window=False,
    initializer_range=0.02,
    bos_token_id=151643,
    eos_token_id=151645,
)

# The same architecture, shrunk for CPU tests. A wider init than 0.02 keeps a
# random 2-layer model from repeating one token forever, so generation
# checks mean something.
QWEN3_TINY = dict(
    QWEN3_0_6B,
    vocab_size=1024,
    hidden_size=64,
    intermediate_size=192,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=2048,
    initializer_range=0.1,
    bos_token_id=None,
    eos_token_id=None,
)

VARIANTS = {"0.6b": QWEN3_0_6B, "tiny": QWEN3_TINY}
ALIASES = {"qwen3-0.6b": "0.6b", "0.6B": "0.6b", "qwen3-tiny": "tiny"}


def canonical(spec: str) -> str:
    """ "tiny", "0.6b" (a built-in architecture) or an existing local directory."""
    spec = ALIASES.get(spec, spec)
    if spec in VARIANTS:
        return spec
    if os.path.isdir(spec):
        return spec
    raise ValueError(
        f"unknown model {spec!r}: use 'tiny', '0.6b' or a local Hugging Face checkpoint directory "
        "(nothing is downloaded)"
    )


def is_builtin(spec: str) -> bool:
    return ALIASES.get(spec, spec) in VARIANTS


def config(variant: str = "tiny", **overrides):
    """A transformers Qwen3Config for a built-in variant, SDPA attention."""
    from transformers import Qwen3Config

    kwargs = dict(VARIANTS[canonical(variant)])
    kwargs.update(overrides)
    cfg = Qwen3Config(**kwargs)
    cfg._attn_implementation = "sdpa"
    return cfg


def build(spec: str = "tiny", seed: int = 0, dtype: torch.dtype = torch.float32, **overrides):
    """A Qwen3ForCausalLM on the CPU in eval mode.

    Built-in variants get random weights from `seed` (same seed, same bytes),
    with `overrides` of their configuration (fewer layers, a smaller
    vocabulary); a directory is loaded with local_files_only=True.
    """
    from transformers import Qwen3ForCausalLM

    spec = canonical(spec)
    if overrides and spec not in VARIANTS:
        raise ValueError(
            f"configuration overrides {sorted(overrides)} apply to 'tiny' and '0.6b', not to a checkpoint: "
            "edit the checkpoint's config.json, or build a built-in variant"
        )
    if spec in VARIANTS:
        cfg = config(spec, **overrides)
        rng_state = torch.random.get_rng_state()
        try:
            torch.manual_seed(seed)
            model = Qwen3ForCausalLM(cfg)
        finally:
            torch.random.set_rng_state(rng_state)
    else:
        from transformers import AutoModelForCausalLM, PreTrainedModel

        # Hub kernels (transformers' `kernels` integration, on by default where the kernels package is
        # installed) are off: they know only their own device types, so model.train() on flagos would raise
        # re-kernelizing for 'flagos', and on flagos the routes decide what runs.
        off = {"use_kernels": False} if hasattr(PreTrainedModel, "set_use_kernels") else {}
        model = AutoModelForCausalLM.from_pretrained(spec, local_files_only=True, attn_implementation="sdpa", **off)
    model = model.to(dtype=dtype).eval()
    model.generation_config.pad_token_id = model.generation_config.eos_token_id or 0
    return model


def describe(model) -> str:
    c = model.config
    n = sum(p.numel() for p in model.parameters())
    return (
        f"Qwen3 {c.num_hidden_layers} layers, hidden {c.hidden_size}, {c.num_attention_heads} heads "
        f"({c.num_key_value_heads} KV), vocab {c.vocab_size}, {n / 1e6:.1f}M parameters"
    )


def tokens(vocab_size: int, batch: int, length: int, seed: int = 0) -> torch.Tensor:
    """Deterministic random token ids (CPU, int64) of shape (batch, length)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (batch, length), generator=g)
