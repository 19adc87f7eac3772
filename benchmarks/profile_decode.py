"""Where decode or prefill time goes on flagos vs native: torch.profiler and cProfile, same run.

    python benchmarks/profile_decode.py [--model 0.6b] [--tokens 24] [--task decode|prefill]

Prints, for each device, the top operators by self CPU time and the Python
functions with the most total time (cProfile), so a gap between flagos and
native can be traced to an operator or to Python code that behaves
differently on flagos. On a GPU it also prints the kernels by device time and
the CUDA runtime calls that block the host (synchronize, memcpy, malloc/free):
equal kernel time with a longer wall time points at host cost or a sync,
longer kernel time at a different kernel choice.
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


def _workload(model, device: str, task: str, tokens: int, prompt):
    if task == "decode":
        ids = prompt.to(device)
        return lambda: workloads.greedy(model, ids, tokens)
    ids = qwen3.tokens(model.config.vocab_size, 8, 512).to(device)

    def prefill():
        with torch.inference_mode():
            model(ids, use_cache=False, logits_to_keep=1)

    return prefill


BLOCKING = ("Synchronize", "Memcpy", "cudaMalloc", "cudaFree", "cudaHostAlloc", "EventSynchronize", "StreamWait")


def run(model, device: str, task: str, tokens: int, prompt) -> None:
    step = _workload(model, device, task, tokens, prompt)
    for _ in range(2):  # warm up (cuDNN / cuBLAS plans, allocator)
        step()
    workloads.synchronize(device)
    t0 = time.perf_counter()
    step()
    workloads.synchronize(device)
    wall = time.perf_counter() - t0
    unit = f"{tokens / wall:.1f} tokens/s" if task == "decode" else f"{8 * 512 / wall:.0f} tokens/s"
    print(f"\n=== {device} {task}: {unit} ({wall * 1e3:.1f} ms)")
    acts = [torch.profiler.ProfilerActivity.CPU]
    gpu = torch.cuda.is_available()
    if gpu:
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        step()
        workloads.synchronize(device)
    avg = prof.key_averages()
    print(avg.table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=48))
    if gpu:
        print(avg.table(sort_by="self_device_time_total", row_limit=10, max_name_column_width=48))
        kernel_us = sum(e.self_device_time_total for e in avg)
        print(f"total device time {kernel_us / 1e3:.2f} ms")
        blocking = [(e.key, e.count, e.cpu_time_total) for e in avg if any(b in e.key for b in BLOCKING)]
        for key, count, total in sorted(blocking, key=lambda r: -r[2]):
            print(f"  blocking call {key}: {count} calls, {total / 1e3:.2f} ms")
    pr = cProfile.Profile()
    pr.enable()
    step()
    workloads.synchronize(device)
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
    print("\n".join(s.getvalue().splitlines()[-22:]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="0.6b" if torch_fl.backing() == "cuda" else "tiny")
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--task", choices=("decode", "prefill"), default="decode")
    args = p.parse_args()
    dtype = torch.bfloat16 if torch_fl.backing() == "cuda" else torch.float32
    model = qwen3.build(args.model, seed=0, dtype=dtype).eval()
    prompt = qwen3.tokens(model.config.vocab_size, 1, 32)
    native = "cuda" if torch_fl.backing() == "cuda" else "cpu"
    for device in ("flagos", native):
        run(model.to(device), device, args.task, args.tokens, prompt)


if __name__ == "__main__":
    main()
