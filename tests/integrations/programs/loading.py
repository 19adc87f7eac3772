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
# An index and no device at all name flagos:i as they name cuda:i on a GPU; a device-mapped model's pipeline
# sends its inputs to the map's first device.
last = torch.flagos.device_count() - 1
out["pipeline_index"] = str(pipeline("text-generation", model=path, device=last).model.device)
out["pipeline_default"] = str(pipeline("text-generation", model=path).model.device)
mapped = pipeline("text-generation", model=path, device_map="auto")
out["pipeline_mapped"] = [str(mapped.device), str(mapped.model.device)]

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

# safe_open onto a flagos device: whole tensors and slices, as accelerate's and PEFT's loaders read them.
from safetensors import safe_open  # noqa: E402

with safe_open(file, framework="pt", device=f"flagos:{last}") as f:
    name = next(iter(f.keys()))
    whole, rows = f.get_tensor(name), f.get_slice(name)[:2]
out["safe_open"] = {
    "devices": sorted({str(whole.device), str(rows.device)}),
    "equal": torch.equal(whole.cpu(), reference[name]) and torch.equal(rows.cpu(), reference[name][:2]),
}

# accelerate's loader with a device map over two devices opens the file once per device (safe_open).
from accelerate import init_empty_weights, load_checkpoint_and_dispatch  # noqa: E402
from transformers import AutoConfig  # noqa: E402

with init_empty_weights():
    empty = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
dispatched = load_checkpoint_and_dispatch(empty, file, device_map={"model": 0, "lm_head": last})
out["dispatched"] = {"devices": sorted({str(p.device) for p in dispatched.parameters()}), "tokens": greedy(dispatched)}
# onto one device it reads the whole file with safetensors' load_file(device=...)
with init_empty_weights():
    empty = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
one = load_checkpoint_and_dispatch(empty, file, device_map={"": f"flagos:{last}"})
out["dispatched_one"] = {"devices": sorted({str(p.device) for p in one.parameters()}), "tokens": greedy(one)}
result(out)
