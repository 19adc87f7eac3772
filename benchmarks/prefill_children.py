"""Prefill in fresh processes, native CUDA and flagos alternating, with each forward's wall, CPU and GPU time.

e2e.py's child rounds put flagos prefill anywhere from 0.5x to 1.1x of native. This runs the same
forward (Qwen3-0.6B architecture, bf16, 8 x 512 tokens, no_grad, last-position logits) in N pairs of
child processes (ABBA order) and records, per forward, the wall time, the main thread's CPU time
and the GPU time between CUDA events around it, and where the process ran (CPU at start and end,
threads, tracked Python objects): whether a slow child is slow for native and flagos alike, and
whether it stays slow. (CPU time equal to wall time does not say the host sets the pace: the CUDA
driver spins on the CPU while a full launch queue waits for the GPU too.)

    python benchmarks/prefill_children.py --pairs 5 --json benchmarks/results/prefill-children-h200.jsonl
    python benchmarks/prefill_children.py --model tiny --pairs 1   # host backing: native is CPU, no GPU time

The native child imports no torch_fl (qwen3.py is loaded by path, as e2e.py's children do).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch_fl", "models")


def current_cpu() -> int:
    """The CPU this process last ran on (field 39 of /proc/self/stat)."""
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def child(variant: str, model_spec: str, forwards: int) -> dict:
    sys.path.insert(0, MODELS_DIR)
    import gc

    import qwen3
    import torch
    import workloads

    if variant == "flagos":
        import torch_fl  # noqa: F401

    gpu = torch.cuda.is_available()
    dev = torch.device("flagos", 0) if variant == "flagos" else torch.device("cuda", 0) if gpu else torch.device("cpu")
    spec = model_spec if model_spec != "auto" else "0.6b" if gpu else "tiny"
    model = qwen3.build(spec, seed=0, dtype=torch.bfloat16 if gpu else torch.float32).to(dev).eval()
    ids = qwen3.tokens(model.config.vocab_size, 8, 512 if gpu else 32, seed=2).to(dev)
    report = {
        "variant": variant,
        "cpu_start": current_cpu(),
        "threads": torch.get_num_threads(),
        "gc_objects": len(gc.get_objects()),
    }
    rows = []  # (wall ms, main-thread CPU ms, GPU ms) per forward; the first two are warm-up
    with torch.no_grad():
        for _ in range(forwards + 2):
            workloads.synchronize(dev)
            if gpu:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record(torch.cuda.current_stream())
            wall, cpu = time.perf_counter(), time.thread_time()
            model(input_ids=ids, use_cache=False, logits_to_keep=1)
            cpu = time.thread_time() - cpu
            if gpu:
                end.record(torch.cuda.current_stream())
            workloads.synchronize(dev)
            wall = time.perf_counter() - wall
            rows.append((round(wall * 1e3, 2), round(cpu * 1e3, 2), round(start.elapsed_time(end), 2) if gpu else None))
    report["cpu_end"] = current_cpu()
    report["torch_fl_imported"] = "torch_fl" in sys.modules
    timed = rows[2:]
    for i, name in enumerate(("wall", "cpu", "gpu")):
        report[f"median_{name}_ms"] = statistics.median(r[i] for r in timed) if timed[0][i] is not None else None
    report["forwards"] = rows
    return report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=5, help="pairs of child processes (default 5)")
    p.add_argument("--model", default="auto", help="0.6b, tiny (default: 0.6b on a GPU, tiny on the host)")
    p.add_argument("--forwards", type=int, default=12, help="timed forwards per child, after 2 warm-up ones")
    p.add_argument("--json", help="write one JSON line per child here")
    p.add_argument("--child", choices=("native", "flagos"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.model, args.forwards)))
        return 0
    reports = []
    print(f"{'variant':<8} {'wall ms':>8} {'cpu ms':>8} {'gpu ms':>8}  cpu")
    for i in range(args.pairs):
        for variant in ("native", "flagos") if i % 2 == 0 else ("flagos", "native"):
            cmd = [
                sys.executable,
                __file__,
                "--child",
                variant,
                "--model",
                args.model,
                "--forwards",
                str(args.forwards),
            ]
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if run.returncode != 0:
                print(f"{variant}: child failed\n{run.stderr[-2000:]}", file=sys.stderr)
                return 1
            r = json.loads(run.stdout.strip().splitlines()[-1])
            reports.append(r)
            gpu_ms = "-" if r["median_gpu_ms"] is None else f"{r['median_gpu_ms']:.2f}"
            print(
                f"{variant:<8} {r['median_wall_ms']:>8.2f} {r['median_cpu_ms']:>8.2f} {gpu_ms:>8}"
                f"  {r['cpu_start']}->{r['cpu_end']}",
                flush=True,
            )
    for variant in ("native", "flagos"):
        walls = [r["median_wall_ms"] for r in reports if r["variant"] == variant]
        print(f"{variant}: median of children {statistics.median(walls):.2f} ms, {min(walls):.2f} to {max(walls):.2f}")
    if args.json:
        with open(args.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in reports)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
