"""Loading as a user writes it: a tiny Qwen3 saved with save_pretrained, loaded with from_pretrained and
each device_map, run through pipeline(device=...) and generate, and a safetensors file loaded onto flagos.
Prints where the weights landed and the greedy tokens, which the test compares with the CPU's.

    python loading.py WORKDIR [--no-opt-in]
"""

from __future__ import annotations

import os
import sys

import torch
from common import opt_in, result, tiny_qwen3

import torch_fl

opt_in()

from transformers import AutoModelForCausalLM  # noqa: E402

work = sys.argv[1]
path = os.path.join(work, "tiny")
tiny_qwen3().save_pretrained(path)
prompt = torch.randint(0, 128, (2, 6), generator=torch.Generator().manual_seed(5))
out: dict = {}


def greedy(model) -> list:
    device = next(p.device for p in model.parameters() if p.device.type != "meta")
    tokens = model.generate(prompt.to(device), max_new_tokens=6, do_sample=False, pad_token_id=0)
    return tokens.cpu().tolist()


out["cpu_tokens"] = greedy(AutoModelForCausalLM.from_pretrained(path))
for name, device_map in [("flagos", "flagos"), ("flagos:0", {"": "flagos:0"}), ("auto", "auto")]:
    model = AutoModelForCausalLM.from_pretrained(path, device_map=device_map)
    out[name] = {"devices": sorted({str(p.device) for p in model.parameters()}), "tokens": greedy(model)}
    model.train()  # transformers re-kernelizes on a mode change
    out[name]["train_ok"] = True

# device_map="auto" with max_memory: layers over the flagos devices, the rest offloaded to the CPU.
count = torch.flagos.device_count()
budget = {i: "60KB" for i in range(count)} | {"cpu": "1GB"}
model = AutoModelForCausalLM.from_pretrained(path, device_map="auto", max_memory=budget)
out["max_memory"] = {"map": {k: str(v) for k, v in model.hf_device_map.items()}, "tokens": greedy(model)}

from transformers import pipeline  # noqa: E402

pipe = pipeline("text-generation", model=path, device="flagos")
out["pipeline_device"] = str(pipe.model.device)

import safetensors.torch  # noqa: E402

file = os.path.join(path, "model.safetensors")
reference = safetensors.torch.load_file(file)
for label, load in [
    ("integrations.load_file", lambda: torch_fl.integrations.load_file(file, "flagos:0")),
    ("safetensors.load_file", lambda: safetensors.torch.load_file(file, device="flagos")),
]:
    tensors = load()
    out[label] = {
        "devices": sorted({str(t.device) for t in tensors.values()}),
        "equal": all(torch.equal(tensors[k].cpu(), v) for k, v in reference.items()),
    }
result(out)
