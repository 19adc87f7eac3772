"""Distributed training of Qwen3 with DDP and FSDP2 on flagos against native, one torchrun per (mode, side).

    python -m benchmarks.multigpu                      # every GPU: Qwen3-0.6B, batch 4 x 512 per GPU
    python -m benchmarks.multigpu --nproc 2 --rounds 4
    python -m benchmarks.multigpu --quick --nproc 2    # host smoke: tiny Qwen3, gloo, to the temporary folder

Each round runs, for DDP and for FSDP2 (`fully_shard` on every decoder layer, then the model), one
`torchrun --standalone --nproc-per-node N` job per side, alternating which side goes first (ABBA over
rounds). `native` trains on cuda:i over NCCL (on the CPU over gloo without a GPU) and never imports torch_fl;
`flagos` trains the same model on flagos:i with the flagos backend (NCCL on a CUDA backing, gloo on host
memory; host memory gets N virtual devices). Both build the same seeded model in fp32, train it under bf16
autocast with AdamW, each rank on its own seeded batch, and time `--steps` steps after `--warmup`, each to a
device synchronisation; a job's step time is its slowest rank's median. Reported per mode: tokens/s per
GPU, the ratio flagos / native (median of the rounds' ratios, with its noise), peak memory (the largest
rank's) and its ratio, and rank 0's loss curve on each side with their largest difference (within
tolerance: relative 1e-2). NVLink multicast stays off in every process (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1).

Writes benchmarks/results/multigpu-<machine>x<N>.json (`multigpu-h200x2.json` on two H200s;
benchmarks/common.py; --out redirects it).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks import common

REPO = common.REPO
RESULT_TAG = "MULTIGPU_RESULT "
MODES = ("ddp", "fsdp")
LOSS_RTOL = 1e-2
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _sizes(quick: bool) -> dict:
    if quick:
        return {"variant": "tiny", "layers": 2, "batch": 2, "length": 16}
    return {"variant": "0.6b", "layers": None, "batch": 4, "length": 512}


def _wrap(model, mode: str, device, world: int):
    import torch

    if mode == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def worker(args) -> dict | None:
    """One rank of a torchrun job: train, time, and (rank 0) return the job's result."""
    import torch
    import torch.distributed as dist

    common.models()
    local, world = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    if args.side == "flagos":
        import torch_fl

        device, backend, backing = torch.device("flagos", local), None, torch_fl.backing()  # None: flagos's own
        torch.flagos.set_device(local)
    else:
        on_gpu = torch.cuda.is_available()
        device = torch.device("cuda", local) if on_gpu else torch.device("cpu")
        backend, backing = ("nccl" if on_gpu else "gloo"), device.type
        if on_gpu:
            torch.cuda.set_device(local)
    dist.init_process_group(backend)
    rank = dist.get_rank()
    mine, losses = _train(args, device, world, rank)
    ranks = [None] * world
    dist.all_gather_object(ranks, mine)
    # Only the group's last reference joins gloo's worker threads, and a DDP module holds one: with the model
    # gone (_train returned, cycles collected) the threads finish their work here, not during interpreter
    # finalization, where freeing a work's tensors aborts the process (plain PyTorch; ~1 job in 10 on 2 cores).
    gc.collect()
    dist.destroy_process_group()
    if rank != 0:
        return None
    sz = _sizes(args.quick)
    step_s = max(r["step_s"] for r in ranks)  # the slowest rank sets the pace
    peaks = [r["peak_bytes"] for r in ranks if r["peak_bytes"] is not None]
    return {
        "side": args.side,
        "mode": args.mode,
        "world_size": world,
        "backing": backing,
        "step_ms": round(step_s * 1e3, 3),
        "tokens_per_s_per_gpu": sz["batch"] * sz["length"] / step_s,
        "peak_bytes": max(peaks) if peaks else None,
        "losses": [float(x) for x in losses],
    }


def _train(args, device, world: int, rank: int) -> tuple[dict, list[float]]:
    """Build, wrap and train this rank's model; its median step time, peak memory and losses."""
    import qwen3
    import torch
    import workloads

    sz = _sizes(args.quick)
    overrides = {} if sz["layers"] is None else {"num_hidden_layers": sz["layers"]}
    model = qwen3.build(sz["variant"], seed=0, dtype=torch.float32, **overrides).to(device)
    model.train()
    vocab = model.config.vocab_size
    model = _wrap(model, args.mode, device, world)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = qwen3.tokens(vocab, sz["batch"], sz["length"], seed=1 + rank).to(device)
    losses = []

    def step():
        losses.append(workloads.train_step(model, opt, ids))

    for _ in range(args.warmup):
        step()
    workloads.synchronize(device)
    workloads.reset_peak_memory(device)
    seconds = []
    for _ in range(args.steps):
        t = time.perf_counter()
        step()
        workloads.synchronize(device)
        seconds.append(time.perf_counter() - t)
    return {"step_s": statistics.median(seconds), "peak_bytes": workloads.peak_memory(device)}, losses


def _job(side: str, mode: str, args) -> dict:
    """One torchrun job; rank 0's result, or the error."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}"]
    cmd += ["-m", "benchmarks.multigpu", "--worker", "--side", side, "--mode", mode]
    cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup)] + (["--quick"] if args.quick else [])
    env = {**os.environ, **NO_MULTICAST}
    env.pop("FLAGOS_USE_FLAGGEMS", None)
    env.pop("FLAGOS_BACKEND_CONFIG", None)  # flagos on its native routes, as native is
    if side == "flagos" and not _on_gpu():
        env["FLAGOS_HOST_DEVICES"] = str(args.nproc)
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"side": side, "mode": mode, "error": f"timed out after {args.timeout} s"}
    lines = [ln[len(RESULT_TAG) :] for ln in proc.stdout.splitlines() if ln.startswith(RESULT_TAG)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout)[-2000:]
        return {"side": side, "mode": mode, "error": f"torchrun exited {proc.returncode}: {tail}"}
    return {**json.loads(lines[-1]), "wall_s": round(time.perf_counter() - t, 1)}


def _on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def summarise(raw: list[dict]) -> dict:
    """Per mode: each side's tokens/s per GPU and peak memory, flagos / native per round, the loss curves."""
    out = {}
    for mode in MODES:
        runs = {s: [r for r in raw if r["mode"] == mode and r["side"] == s and "error" not in r] for s in _SIDES}
        errors = sorted({r["error"][:300] for r in raw if r["mode"] == mode and "error" in r})
        entry: dict = {"errors": errors} if errors else {}
        by_round = {s: {r["round"]: r for r in runs[s]} for s in _SIDES}
        ratios = [
            by_round["flagos"][i]["tokens_per_s_per_gpu"] / by_round["native"][i]["tokens_per_s_per_gpu"]
            for i in sorted(set(by_round["native"]) & set(by_round["flagos"]))
        ]
        for s in _SIDES:
            if runs[s]:
                peaks = [r["peak_bytes"] for r in runs[s] if r.get("peak_bytes") is not None]
                entry[s] = {
                    "tokens_per_s_per_gpu": statistics.median(r["tokens_per_s_per_gpu"] for r in runs[s]),
                    "step_ms": [r["step_ms"] for r in runs[s]],
                    "peak_bytes": max(peaks) if peaks else None,
                    "losses": runs[s][0]["losses"],
                }
        if ratios:
            entry.update(common.ratio_stats(ratios))
        if "native" in entry and "flagos" in entry:
            n, f = entry["native"], entry["flagos"]
            if n["peak_bytes"] and f["peak_bytes"]:
                entry["peak_memory_ratio"] = f["peak_bytes"] / n["peak_bytes"]
            diffs = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(f["losses"], n["losses"], strict=True)]
            entry["loss_max_rel_diff"] = max(diffs) if diffs else None
            entry["losses_equal"] = bool(diffs) and max(diffs) <= LOSS_RTOL
        out[mode] = entry
    return out


_SIDES = ("native", "flagos")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=None, help="processes (GPUs) per job (default: every GPU; 2 on host)")
    p.add_argument("--rounds", type=int, default=4, help="rounds; each runs both modes on both sides (default 4)")
    p.add_argument("--modes", default="ddp,fsdp", help="comma list of ddp,fsdp (default both)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per job (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--quick", action="store_true", help="host smoke sizes (tiny Qwen3); writes to the temp folder")
    p.add_argument("--deadline", type=float, default=None, help="start no round that would end after this many s")
    p.add_argument("--timeout", type=int, default=900, help="seconds per torchrun job (default 900)")
    p.add_argument("--out", help="JSON path or folder (default results/multigpu-<machine>x<N>.json)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--side", choices=_SIDES, help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        res = worker(args)
        if res is not None:
            print(RESULT_TAG + json.dumps(res), flush=True)
        return 0
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        p.error(f"unknown mode(s) {', '.join(unknown)}: choose from {', '.join(MODES)}")
    if args.nproc is None:
        import torch

        args.nproc = torch.cuda.device_count() if torch.cuda.is_available() else 2
    benchmark = f"multigpu-{common.machine()}x{args.nproc}"
    started = time.perf_counter()
    raw: list[dict] = []
    for r in common.rounds_within(args.rounds, args.deadline, started):
        for mode in modes:
            for side in common.abba(r, *_SIDES):
                res = {**_job(side, mode, args), "round": r}
                raw.append(res)
                brief = res.get("error", "")[:300] or f"{res['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU"
                print(f"round {r + 1}: {mode} {side}: {brief}", flush=True)
    report = {
        "wall_s": round(time.perf_counter() - started, 1),
        "args": {k: v for k, v in vars(args).items() if k not in ("worker", "side", "mode", "out")},
        "sizes": _sizes(args.quick),
        "world_size": args.nproc,
        "loss_rtol": LOSS_RTOL,
        **summarise(raw),
        "raw": raw,
    }
    path = common.write("multigpu", report, common.out_path("multigpu", args.out, args.quick, f"{benchmark}.json"))
    for mode in modes:
        e = report[mode]
        if "ratio_median" in e:
            peak = f"{e['peak_memory_ratio']:.3f}x" if "peak_memory_ratio" in e else "n/a"
            print(
                f"{mode}: flagos {common.format_ratio(e)} native ({e['pairs']} rounds), "
                f"losses equal: {e['losses_equal']}, peak memory {peak}"
            )
        else:
            print(f"{mode}: no pair of results: {'; '.join(e.get('errors', []))[:500]}")
    print(f"wrote {path}")
    return 0 if all("ratio_median" in report[m] for m in modes) else 1


if __name__ == "__main__":
    sys.exit(main())
