"""GPT-2 small, BERT-base and ViT-B/16, built from transformers' default configurations (their published
sizes; nothing is downloaded), and a tiny version of each for host memory and tests: the standard workloads
that `python -m torch_fl calibrate --model NAME` runs beside Qwen3.

Each model carries its training head (a language-model, masked-LM or ImageNet classification head), so one
batch serves a forward pass and a training step. Imports only torch and transformers (never torch_fl).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Standard:
    title: str
    causal: bool  # generates text: the decode task applies
    batch: int  # what people train with on one GPU
    seq: int | None  # tokens per sequence (None: images)


STANDARD = {
    "gpt2": Standard("GPT-2 small", causal=True, batch=8, seq=1024),
    "bert": Standard("BERT-base", causal=False, batch=32, seq=128),
    "vit": Standard("ViT-B/16", causal=False, batch=64, seq=None),
}
TINY = {
    "gpt2": dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=128, bos_token_id=127, eos_token_id=127),
    "bert": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=128),
    "vit": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32),
}
TINY_BATCH, TINY_SEQ = 2, 16
IMAGENET_CLASSES = 1000


def names() -> list[str]:
    """The names `--model` takes: each standard model, full size and "-tiny"."""
    return [n + suffix for n in STANDARD for suffix in ("", "-tiny")]


def parse(spec: str) -> tuple[str, bool] | None:
    """("gpt2", tiny?) for a standard model's name, None for any other."""
    base, tiny = (spec[: -len("-tiny")], True) if spec.endswith("-tiny") else (spec, False)
    return (base, tiny) if base in STANDARD else None


def build(name: str, tiny: bool = False, seed: int = 0, dtype: torch.dtype = torch.float32):
    """The model on the CPU in eval mode, random weights from `seed`, SDPA attention."""
    import transformers as tf

    classes = {
        "gpt2": (tf.GPT2Config, tf.GPT2LMHeadModel, {}),
        "bert": (tf.BertConfig, tf.BertForMaskedLM, {}),
        "vit": (tf.ViTConfig, tf.ViTForImageClassification, {"num_labels": IMAGENET_CLASSES}),
    }
    config_cls, model_cls, head = classes[name]
    config = config_cls(**head, **(TINY[name] if tiny else {}))
    config._attn_implementation = "sdpa"
    with torch.random.fork_rng(devices=[]):  # the caller's CPU generator is left as it was
        torch.manual_seed(seed)
        model = model_cls(config)
    if STANDARD[name].causal:
        model.generation_config.pad_token_id = model.config.eos_token_id
    return model.to(dtype=dtype).eval()


def batch(model, batch: int, seq: int | None, seed: int = 0) -> dict:
    """One batch of inputs with labels (CPU tensors): token ids, or images at the model's resolution."""
    config = model.config
    g = torch.Generator().manual_seed(seed)
    if hasattr(config, "image_size"):
        pixels = torch.randn(batch, config.num_channels, config.image_size, config.image_size, generator=g)
        return {"pixel_values": pixels, "labels": torch.randint(0, config.num_labels, (batch,), generator=g)}
    ids = torch.randint(0, config.vocab_size, (batch, seq), generator=g)
    return {"input_ids": ids, "labels": ids}


def to(inputs: dict, device, dtype: torch.dtype | None = None) -> dict:
    """The batch on `device`, floating-point inputs in `dtype` (the model's)."""
    return {
        k: v.to(device, dtype=dtype if dtype is not None and v.is_floating_point() else None) for k, v in inputs.items()
    }


@torch.no_grad()
def forward(model, inputs: dict):
    """An inference forward pass (no labels, no loss)."""
    return model(**{k: v for k, v in inputs.items() if k != "labels"})


def train_step(model, opt, inputs: dict, amp_dtype=torch.bfloat16) -> torch.Tensor:
    """One step under autocast: zero_grad, forward with the loss, backward, `opt.step()`; the loss, unread."""
    opt.zero_grad(set_to_none=True)
    with torch.autocast(next(model.parameters()).device.type, dtype=amp_dtype):
        loss = model(**inputs).loss
    loss.backward()
    opt.step()
    return loss.detach()
