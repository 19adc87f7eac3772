"""Where decode time goes on flagos vs native: torch.profiler and cProfile, same run.

    python benchmarks/profile_decode.py [--model 0.6b] [--tokens 24]

Prints, for each device, the top operators by self CPU time and the Python
functions with the most total time (cProfile), so a gap between flagos and
native can be traced to an operator or to Python code that behaves
differently on flagos.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch

import torch_fl  # noqa: F401  (registers flagos)
from torch_fl.models import qwen3, workloads


def run(model, device: str, tokens: int, prompt) -> None:
    ids = prompt.to(device)
    workloads.greedy(model, ids, 4)  # warm up
    workloads.synchronize(device)
    t0 = time.perf_counter()
    workloads.greedy(model, ids, tokens)
    workloads.synchronize(device)
    print(f"\n=== {device}: {tokens / (time.perf_counter() - t0):.1f} tokens/s")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        workloads.greedy(model, ids, tokens)
        workloads.synchronize(device)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=48))
    pr = cProfile.Profile()
    pr.enable()
    workloads.greedy(model, ids, tokens)
    workloads.synchronize(device)
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
    print("\n".join(s.getvalue().splitlines()[-22:]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="0.6b" if torch_fl.backing() == "cuda" else "tiny")
    p.add_argument("--tokens", type=int, default=24)
    args = p.parse_args()
    dtype = torch.bfloat16 if torch_fl.backing() == "cuda" else torch.float32
    model = qwen3.build(args.model, seed=0, dtype=dtype).eval()
    prompt = qwen3.tokens(model.config.vocab_size, 1, 32)
    native = "cuda" if torch_fl.backing() == "cuda" else "cpu"
    for device in ("flagos", native):
        run(model.to(device), device, args.tokens, prompt)


if __name__ == "__main__":
    main()
