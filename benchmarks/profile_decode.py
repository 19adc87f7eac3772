"""Where decode or prefill time goes on flagos vs native: torch.profiler and cProfile, same run.

    python -m benchmarks.profile_decode [--model 0.6b] [--tokens 24] [--task decode|prefill]
        [--after-decode N [--reload]] [--trace-dir DIR]

Prints, for each device, the top operators by self CPU time and the Python
functions with the most total time (cProfile), then a side-by-side table of
the operators whose calls or self CPU time differ most between flagos and
native, so a gap can be traced to an operator or to Python code that behaves
differently on flagos. On a GPU it also prints the kernels by device time,
the number of kernels launched, the time the GPU was busy against the wall
time, and the CUDA runtime calls that block the host (synchronize, memcpy,
malloc/free): equal kernel time with a longer wall time points at host cost
or a sync, longer kernel time at a different kernel choice. --trace-dir
writes gzipped Chrome traces (chrome://tracing, Perfetto).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import gc
import gzip
import io
import os
import pstats
import shutil
import statistics
import tempfile
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
        with torch.no_grad():  # as benchmarks/e2e.py and HF generate
            model(ids, use_cache=False, logits_to_keep=1)

    return prefill


def timing(steps: dict, task: str, tokens: int, rounds: int = 6) -> None:
    """Wall time per step for each device, alternating in ABBA order (going
    first or second in a round is not the same on a busy host), before any
    profiling (a CUDA profiler session leaves the process slower to launch
    kernels)."""
    for device, step in steps.items():
        for _ in range(2):  # warm up (cuDNN / cuBLAS plans, allocator)
            step()
        workloads.synchronize(device)
    times = {d: [] for d in steps}
    order = list(steps.items())
    for i in range(rounds):
        for device, step in order if i % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            step()
            workloads.synchronize(device)
            times[device].append(time.perf_counter() - t0)
    med = {d: statistics.median(t) for d, t in times.items()}
    work = tokens if task == "decode" else 8 * 512
    for d, sec in med.items():
        print(f"=== {d} {task}: {work / sec:.1f} tokens/s ({sec * 1e3:.1f} ms, median of {rounds})")
    first, second = list(med)
    print(f"=== {first}/{second} speed ratio {med[second] / med[first]:.3f}")


BLOCKING = ("Synchronize", "Memcpy", "cudaMalloc", "cudaFree", "cudaHostAlloc", "EventSynchronize", "StreamWait")


def _export_trace(prof, path: str) -> None:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        name = tmp.name
    try:
        prof.export_chrome_trace(name)
        with open(name, "rb") as src, gzip.open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
    finally:
        os.unlink(name)


def run(step, device: str, task: str, trace_dir: str | None) -> dict:
    """Profile one step on `device`; returns {op name: (calls, self CPU us, self device us)}."""
    print(f"\n=== {device} {task} under the profilers")
    acts = [torch.profiler.ProfilerActivity.CPU]
    gpu = torch.cuda.is_available()
    if gpu:
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        t0 = time.perf_counter()
        step()
        workloads.synchronize(device)
        profiled_wall = time.perf_counter() - t0
    avg = prof.key_averages()
    print(avg.table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=48))
    if gpu:
        print(avg.table(sort_by="self_device_time_total", row_limit=12, max_name_column_width=48))
        # Kernel rows (device-side events); operator rows repeat their kernels' time.
        kernels = [e for e in avg if e.device_type == torch.autograd.DeviceType.CUDA]
        busy_us = sum(e.self_device_time_total for e in kernels)
        print(
            f"kernels launched {sum(e.count for e in kernels)}, device busy {busy_us / 1e3:.2f} ms of "
            f"{profiled_wall * 1e3:.2f} ms wall under the profiler ({100 * busy_us / 1e3 / (profiled_wall * 1e3):.0f}%)"
        )
        blocking = [(e.key, e.count, e.cpu_time_total) for e in avg if any(b in e.key for b in BLOCKING)]
        for key, count, total in sorted(blocking, key=lambda r: -r[2]):
            print(f"  blocking call {key}: {count} calls, {total / 1e3:.2f} ms")
    if trace_dir:
        _export_trace(prof, os.path.join(trace_dir, f"trace_{task}_{device}.json.gz"))
    pr = cProfile.Profile()
    pr.enable()
    step()
    workloads.synchronize(device)
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
    print("\n".join(s.getvalue().splitlines()[-22:]))
    return {e.key: (e.count, e.self_cpu_time_total, getattr(e, "self_device_time_total", 0.0)) for e in avg}


def compare(flagos: dict, native: dict, rows: int = 20) -> None:
    """The operators whose calls or self CPU time differ most between the two devices."""
    keys = set(flagos) | set(native)
    zero = (0, 0.0, 0.0)

    def gap(k):
        return abs(flagos.get(k, zero)[1] - native.get(k, zero)[1])

    print("\n=== flagos vs native by operator (self CPU us; calls)")
    print(f"{'operator':<52}{'calls f/n':>14}{'self CPU f':>12}{'self CPU n':>12}{'device f':>10}{'device n':>10}")
    for k in sorted(keys, key=gap, reverse=True)[:rows]:
        f, n = flagos.get(k, zero), native.get(k, zero)
        print(f"{k[:51]:<52}{f'{f[0]}/{n[0]}':>14}{f[1]:>12.0f}{n[1]:>12.0f}{f[2]:>10.0f}{n[2]:>10.0f}")
    for label, d in (("flagos", flagos), ("native", native)):
        print(
            f"{label}: {sum(v[0] for v in d.values())} events, self CPU {sum(v[1] for v in d.values()) / 1e3:.1f} ms,"
            f" device {sum(v[2] for v in d.values()) / 1e3:.1f} ms"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="0.6b" if torch_fl.backing() == "cuda" else "tiny")
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--task", choices=("decode", "prefill"), default="decode")
    p.add_argument("--trace-dir", help="write gzipped Chrome traces here")
    p.add_argument(
        "--after-decode",
        type=int,
        default=0,
        metavar="N",
        help="first decode N tokens on each device (benchmarks/e2e.py runs prefill after decode in one process: "
        "whether prefill is slower there than alone)",
    )
    p.add_argument(
        "--reload",
        action="store_true",
        help="with --after-decode: then free the models (gc, empty_cache) and build them again before the "
        "measured task, as each task of a benchmarks/e2e.py child does",
    )
    args = p.parse_args()
    dtype = torch.bfloat16 if torch_fl.backing() == "cuda" else torch.float32
    native = "cuda" if torch_fl.backing() == "cuda" else "cpu"

    def load() -> dict:
        model = qwen3.build(args.model, seed=0, dtype=dtype).eval()
        native_model = copy.deepcopy(model).to(native)  # copied on the CPU, before the move
        return {"flagos": model.to("flagos"), native: native_model}

    models = load()
    prompt = qwen3.tokens(models[native].config.vocab_size, 1, 32)
    if args.after_decode:
        for d, m in models.items():
            workloads.greedy(m, prompt.to(d), args.after_decode)
            workloads.synchronize(d)
        if args.reload:
            del models, m
            gc.collect()
            for d in ("flagos", native):
                if d != "cpu":
                    workloads.device_module(d).empty_cache()
            models = load()
    steps = {d: _workload(m, d, args.task, args.tokens, prompt) for d, m in models.items()}
    timing(steps, args.task, args.tokens)
    results = {d: run(step, d, args.task, args.trace_dir) for d, step in steps.items()}
    compare(results["flagos"], results[native])


if __name__ == "__main__":
    main()
