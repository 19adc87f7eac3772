"""PEFT, diffusers and TRL as a user writes them, each on flagos and on the CPU from the same seed:
LoRA training then merging, a tiny UNet's output, a small diffusers pipeline moved with .to() and with
enable_model_cpu_offload, one TRL SFTTrainer step. Prints the numbers the test compares.

    python adapters_and_pipelines.py PART... [--no-opt-in]     (PART: lora unet sft pipeline mapped_pipeline)
"""

from __future__ import annotations

import sys

import torch
from common import checksum, opt_in, result, tiny_qwen3, token_rows

import torch_fl  # noqa: F401

opt_in()

DEVICES = ("cpu", "flagos")
out: dict = {}


def lora(device: str) -> dict:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_qwen3().to(device), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    batch = torch.stack([r["input_ids"] for r in token_rows(4)]).to(device)
    losses = []
    for _ in range(3):
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    merged = model.merge_and_unload()
    logits = merged(input_ids=batch).logits
    return {"losses": losses, "merged_checksum": checksum(merged), "logits_sum": float(logits.double().sum())}


def tiny_unet():
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    return UNet2DModel(
        sample_size=8,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
        norm_num_groups=4,
    )


def unet(device: str) -> dict:
    model = tiny_unet().to(device)
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        return {"out": model(x, timestep=10).sample.cpu().double().sum().item()}


def pipeline(device: str, offload: bool) -> dict:
    from diffusers import DDPMPipeline, DDPMScheduler

    model = tiny_unet()
    pipe = DDPMPipeline(unet=model, scheduler=DDPMScheduler(num_train_timesteps=10))
    if offload:
        pipe.enable_model_cpu_offload(device=device)
    else:
        pipe = pipe.to(device)
    images = pipe(batch_size=1, num_inference_steps=3, generator=torch.Generator().manual_seed(2), output_type="np")
    return {"image_sum": float(images.images.sum()), "execution_device": str(pipe._execution_device)}


def saved_stable_diffusion() -> str:
    """A tiny Stable Diffusion pipeline saved to a folder, its CLIP tokenizer's files written here: a pipeline with
    a transformers part (the text encoder), which from_pretrained(device_map=...) loads as transformers does."""
    import json
    import os
    import tempfile

    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    folder = tempfile.mkdtemp()
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in "abcdefghijklmnopqrstuvwxyz":
        vocab[c], vocab[c + "</w>"] = len(vocab), len(vocab) + 1
    with open(os.path.join(folder, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    with open(os.path.join(folder, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
    torch.manual_seed(0)
    text = CLIPTextConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=16,
        projection_dim=16,
    )
    blocks = dict(layers_per_block=1, block_out_channels=(8, 16), norm_num_groups=4)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        cross_attention_dim=16,
        attention_head_dim=2,
        **blocks,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
    )
    vae = AutoencoderKL(
        latent_channels=4,
        **{**blocks, "block_out_channels": (8, 8)},
        sample_size=16,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
    )
    files = [os.path.join(folder, name) for name in ("vocab.json", "merges.txt")]
    StableDiffusionPipeline(
        vae=vae,
        text_encoder=CLIPTextModel(text),
        unet=unet,
        scheduler=DDIMScheduler(steps_offset=1, clip_sample=False),
        tokenizer=CLIPTokenizer(*files, model_max_length=16),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    ).save_pretrained(folder)
    return folder


def mapped_pipeline(folder: str, device: str) -> dict:
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(folder, device_map=device)
    images = pipe(
        "a cat",
        height=16,
        width=16,
        num_inference_steps=2,
        guidance_scale=2.0,
        output_type="np",
        generator=torch.Generator().manual_seed(0),
    ).images
    return {
        "image_sum": float(images.sum()),
        "devices": sorted({str(p.device) for p in pipe.text_encoder.parameters()}),
    }


def word_tokenizer():
    """A tokenizer made here (nothing downloaded): one word per token id of the tiny model."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(128)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", pad_token="t1", eos_token="t2")


def sft(device: str) -> dict:
    from trl import SFTConfig, SFTTrainer

    config = SFTConfig(
        output_dir="/tmp/torch_fl_sft",
        max_steps=1,
        per_device_train_batch_size=4,
        report_to=[],
        save_strategy="no",
        use_cpu=device == "cpu",
        logging_steps=1,
        seed=3,
        disable_tqdm=True,
    )
    rows = [{"input_ids": r["input_ids"].tolist()} for r in token_rows(8)]
    from datasets import Dataset

    trainer = SFTTrainer(
        model=tiny_qwen3(), args=config, train_dataset=Dataset.from_list(rows), processing_class=word_tokenizer()
    )
    trainer.train()
    return {"loss": trainer.state.log_history[0]["loss"], "device": str(next(trainer.model.parameters()).device)}


parts = [a for a in sys.argv[1:] if not a.startswith("--")]
for name, fn in [("lora", lora), ("unet", unet), ("sft", sft)]:
    if name in parts:
        out[name] = {d: fn(d) for d in DEVICES}
if "pipeline" in parts:
    out["pipeline"] = {d: pipeline(d, offload=False) for d in DEVICES}
    out["pipeline_offload"] = pipeline("flagos", offload=True)
if "mapped_pipeline" in parts:
    folder = saved_stable_diffusion()
    out["mapped_pipeline"] = {d: mapped_pipeline(folder, d) for d in DEVICES}
result(out)
