"""generate() with a static cache, which transformers compiles (torch.compile, CUDA graphs on a GPU) on the
devices of its own list: on flagos over a GPU with the transformers adapter, and never on flagos over host
memory, as on the CPU. Prints the greedy tokens of the reference device (cuda on a GPU, else the CPU) and
of flagos, the graphs each compiled, and transformers' warnings.

    python compiled_generate.py [--as-gpu] [--no-opt-in]

--as-gpu: on host backing, let the adapter take flagos for a GPU (it then compiles on the host), to check
what it does there without one.
"""

from __future__ import annotations

import copy
import logging
import sys

import torch
from common import opt_in, result, tiny_qwen3

import torch_fl

opt_in()

import transformers  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

if "--as-gpu" in sys.argv:
    import torch_fl.integrations.transformers as adapter

    adapter.backing = lambda: "cuda"

warned: list[str] = []


class Collect(logging.Handler):
    def emit(self, record):
        warned.append(record.getMessage())


transformers.logging.set_verbosity_warning()
transformers.logging.get_logger("transformers").addHandler(Collect(logging.WARNING))

model = tiny_qwen3().eval()
prompt = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(3))


def greedy(device: str, **kwargs) -> dict:
    m = copy.deepcopy(model).to(device)
    before = counters["stats"]["unique_graphs"]
    with torch.no_grad():
        out = m.generate(prompt.to(device), max_new_tokens=10, do_sample=False, **kwargs)
    return {"tokens": out.cpu().tolist(), "graphs": counters["stats"]["unique_graphs"] - before}


reference = "cuda" if torch_fl.backing() == "cuda" else "cpu"
result(
    {
        "reference": greedy(reference, cache_implementation="static"),
        "static": greedy("flagos", cache_implementation="static"),
        "dynamic": greedy("flagos"),
        "warnings": warned,
    }
)
