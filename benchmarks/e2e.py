"""End-to-end benchmark: Qwen3 decode, prefill and training on flagos vs native PyTorch.

    python benchmarks/e2e.py                          # GPU: Qwen3-0.6B architecture, all variants
    python benchmarks/e2e.py --model tiny --quick     # host smoke run
    python benchmarks/e2e.py --model /path/to/Qwen3-0.6B --rounds 5
    python benchmarks/e2e.py --variants native,flagos --paired 6   # + in-process pairs
    python benchmarks/e2e.py --variants native,flagos --concurrent  # two GPUs: native and flagos at once
    python benchmarks/e2e.py --tasks decode --variants native,flagos --step-pairs 12  # token by token

Tasks (full sizes): decode (batch 1, 32-token prompt, 64 new tokens, greedy),
prefill (8 x 512 tokens, one forward pass, logits of the last position as
generate() computes them), train (4 x 512, AdamW, bf16 autocast, fp32 weights).
Decode and prefill run the model in bf16 on a GPU (fp32 on host memory).

Variants:
  native           PyTorch on the backing device (cuda, or cpu on host memory); never imports torch_fl
  flagos           flagos with the default (native) routes
  flagos_flaggems  flagos with FLAGOS_USE_FLAGGEMS=1 (the FlagGems profile)
  cuda_flaggems    native cuda under flag_gems.enable() (FlagGems replaces CUDA kernels process-wide)

The parent never touches a device. Every (round, variant) runs in its own child
process (`python benchmarks/e2e.py --worker VARIANT ...`) that prints one JSON
line, so variants that cannot share a process (native CUDA autograd after
torch_fl is imported, PyTorch issue 161129; flag_gems.enable()) are measured
the same way as the others. Rounds alternate between variants, rotating the
order each round. Errors are recorded as results. Built-in models get random
weights from --seed and are saved once to a temporary checkpoint that every
child loads, so all variants hold identical weights.

--paired N first runs decode and prefill on native and flagos in one child
process, alternating call by call for N pairs: on a shared machine whose load
drifts between processes, the median of per-pair ratios is the steadier
number (training is not paired: native CUDA backward cannot share a process
with torch_fl). --concurrent (two GPUs) pairs all three tasks another way:
each round runs the native and the flagos child at the same time, one per
GPU, swapping GPUs every round, so load on the shared host hits both alike;
the median of the rounds' ratios is reported beside the other numbers.
--step-pairs N decodes N sequences on native and flagos in one process and
one thread, alternating token by token (workloads.greedy_steps(): the
forward calls generate() makes), and also decodes each sequence with each
model alone, so the report shows whether alternating slowed the steps.

Writes benchmarks/results/<name>.json (with the command line) and .png (if
matplotlib is installed), and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS_DIR = REPO / "torch_fl" / "models"  # qwen3.py and workloads.py import neither torch_fl nor each other
RESULT_TAG = "E2E_RESULT "
VARIANTS = ("native", "flagos", "flagos_flaggems", "cuda_flaggems")
TASKS = ("decode", "prefill", "train")
SIZES = {
    "full": {
        "decode": {"batch": 1, "prompt": 32, "new_tokens": 64, "warmup": 1, "iters": 2},
        "prefill": {"batch": 8, "length": 512, "warmup": 2, "iters": 5},
        "train": {"batch": 4, "length": 512, "warmup": 2, "iters": 5, "lr": 1e-5},
    },
    "quick": {
        "decode": {"batch": 1, "prompt": 8, "new_tokens": 8, "warmup": 1, "iters": 1},
        "prefill": {"batch": 2, "length": 32, "warmup": 1, "iters": 2},
        "train": {"batch": 2, "length": 32, "warmup": 1, "iters": 2, "lr": 1e-5},
    },
}


# ----------------------------------------------------------------------------- worker (child process)


def _inference_call(task: str, model, sz: dict, seed: int, device):
    """(fn, tokens per call) for decode or prefill on `model` (already on `device`)."""
    import qwen3
    import torch
    import workloads

    if task == "decode":
        ids = qwen3.tokens(model.config.vocab_size, sz["batch"], sz["prompt"], seed=seed + 1).to(device)
        return (lambda: workloads.greedy(model, ids, sz["new_tokens"])), sz["batch"] * sz["new_tokens"]
    ids = qwen3.tokens(model.config.vocab_size, sz["batch"], sz["length"], seed=seed + 2).to(device)

    @torch.no_grad()
    def prefill():
        return model(input_ids=ids, use_cache=False, logits_to_keep=1).logits

    return prefill, sz["batch"] * sz["length"]


def _paired_worker(args) -> dict:
    """Native and flagos in one process, alternating call by call (ABBA order).

    Machine load that drifts between child processes (the H200 host is
    shared: native alone varied by 40 % between rounds) hits both devices of
    a pair alike, so the median of per-pair ratios is far steadier than a
    ratio of medians from different processes. Training is not paired: native
    CUDA backward fails once torch_fl is imported (PyTorch issue 161129).
    """
    sys.path.insert(0, str(MODELS_DIR))
    sys.path.insert(0, str(REPO))
    import qwen3
    import torch
    import workloads

    import torch_fl

    native = torch.device("cuda", 0) if torch_fl.backing() == "cuda" else torch.device("cpu")
    flagos = torch.device("flagos", 0)
    dtype = _infer_dtype(args, torch_fl.backing() == "cuda")
    sizes = json.loads(args.sizes)
    out: dict = {"variant": "paired", "pid": os.getpid(), "backing": torch_fl.backing(), "tasks": {}}
    models = {d: qwen3.build(args.ckpt, dtype=dtype).to(d) for d in (native, flagos)}
    for task in [t for t in args.tasks.split(",") if t in ("decode", "prefill") and args.paired > 0]:
        sz = sizes[task]
        calls = {d: _inference_call(task, models[d], sz, args.seed, d) for d in models}
        tokens = calls[native][1]
        for d, (fn, _) in calls.items():
            for _ in range(sz["warmup"]):
                fn()
            workloads.synchronize(d)
        secs: dict = {native: [], flagos: []}
        results = {}
        for i in range(args.paired):
            for d in (native, flagos) if i % 2 == 0 else (flagos, native):
                t = time.perf_counter()
                results[d] = calls[d][0]()
                workloads.synchronize(d)
                secs[d].append(time.perf_counter() - t)
        ratios = [n / f for n, f in zip(secs[native], secs[flagos], strict=True)]
        res = {
            "pairs": args.paired,
            "ratio_median": statistics.median(ratios),
            "ratios": [round(r, 4) for r in ratios],
            "native_tokens_per_s": tokens / statistics.median(secs[native]),
            "flagos_tokens_per_s": tokens / statistics.median(secs[flagos]),
        }
        if task == "decode":
            res["tokens_match_native"] = results[native].cpu().tolist() == results[flagos].cpu().tolist()
        out["tasks"][task] = res
    if args.step_pairs > 0 and "decode" in args.tasks.split(","):
        out["tasks"]["decode_tokens"] = _token_pairs(models, native, flagos, sizes["decode"], args)
    return out


def _token_pairs(models: dict, native, flagos, sz: dict, args) -> dict:
    """Decode on native and flagos alternating token by token in one thread.

    A generate() pair is two 1.7 s calls, long enough for the shared host's
    load to change between them; a decode step is ~25 ms. Both models decode
    the same prompt with greedy_steps() (generate()'s forward calls, one token
    at a time); each step is timed to its synchronisation, ABBA by token. Each
    sequence is also decoded by each model alone (ABBA by sequence), so that
    the report shows whether alternating slows the steps themselves.
    """
    import qwen3
    import workloads

    devices = (native, flagos)
    ids = {
        d: qwen3.tokens(models[d].config.vocab_size, sz["batch"], sz["prompt"], seed=args.seed + 1).to(d)
        for d in devices
    }
    new = sz["new_tokens"]
    secs: dict = {d: [] for d in devices}
    alone: dict = {d: [] for d in devices}
    match = True
    workloads.run_steps(workloads.greedy_steps(models[native], ids[native], new))  # warm-up
    workloads.run_steps(workloads.greedy_steps(models[flagos], ids[flagos], new))
    for s in range(args.step_pairs):
        steps = {d: workloads.greedy_steps(models[d], ids[d], new) for d in devices}
        for i in range(new):
            for d in devices if (s * new + i) % 2 == 0 else devices[::-1]:
                t = time.perf_counter()
                next(steps[d])
                workloads.synchronize(d)
                secs[d].append(time.perf_counter() - t)
        decoded = {d: workloads.run_steps(steps[d]).cpu().tolist() for d in devices}
        match = match and decoded[native] == decoded[flagos]
        for d in devices if s % 2 == 0 else devices[::-1]:
            t = time.perf_counter()
            workloads.run_steps(workloads.greedy_steps(models[d], ids[d], new))
            workloads.synchronize(d)
            alone[d].append(time.perf_counter() - t)
    ratios = sorted(n / f for n, f in zip(secs[native], secs[flagos], strict=True))
    q = statistics.quantiles(ratios, n=4)
    tokens = sz["batch"] * new * args.step_pairs  # per device, alternating and alone alike
    alone_rate = {d: tokens / sum(alone[d]) for d in devices}
    return {
        "pairs": len(ratios),
        "sequences": args.step_pairs,
        "ratio_median": statistics.median(ratios),
        "ratio_quartiles": [round(q[0], 4), round(q[2], 4)],
        "ratio_of_sums": sum(secs[native]) / sum(secs[flagos]),
        "native_tokens_per_s": tokens / sum(secs[native]),
        "flagos_tokens_per_s": tokens / sum(secs[flagos]),
        "alone_native_tokens_per_s": alone_rate[native],
        "alone_flagos_tokens_per_s": alone_rate[flagos],
        "alone_ratio_median": statistics.median(n / f for n, f in zip(alone[native], alone[flagos], strict=True)),
        "tokens_match_native": match,
    }


def _infer_dtype(args, on_gpu: bool):
    import torch

    if args.dtype == "auto":
        return torch.bfloat16 if on_gpu else torch.float32
    return getattr(torch, args.dtype)


def _worker(args) -> dict:
    variant = args.worker
    sys.path.insert(0, str(MODELS_DIR))
    import qwen3
    import torch
    import workloads

    info: dict = {"variant": variant, "pid": os.getpid(), "tasks": {}}
    stats = routing = None
    if variant in ("flagos", "flagos_flaggems"):
        sys.path.insert(0, str(REPO))  # this checkout's torch_fl, even if another one is installed
        import torch_fl
        from torch_fl import routing
        from torch_fl.routing import summary as stats

        device = torch.device("flagos", 0)
        info["backing"] = torch_fl.backing()
    else:
        device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        info["backing"] = device.type
    if variant == "cuda_flaggems":
        import flag_gems

        flag_gems.enable()
        info["flag_gems"] = getattr(flag_gems, "__version__", "?")
    infer_dtype = _infer_dtype(args, info["backing"] == "cuda")
    sizes = json.loads(args.sizes)

    def load(dtype):
        model = qwen3.build(args.ckpt, dtype=dtype)
        return model.to(device)

    def release():
        import gc

        gc.collect()
        if device.type != "cpu":
            workloads.device_module(device).empty_cache()

    def timed(fn, warmup, iters):
        for _ in range(warmup):
            fn()
        workloads.synchronize(device)
        times = []
        for _ in range(iters):
            t = time.perf_counter()
            out = fn()
            workloads.synchronize(device)
            times.append(time.perf_counter() - t)
        return statistics.median(times), out

    def run_task(task: str, sz: dict) -> dict:
        res: dict = {}
        workloads.reset_peak_memory(device)
        model = load(torch.float32 if task == "train" else infer_dtype)
        if task in ("decode", "prefill"):
            fn, tokens = _inference_call(task, model, sz, args.seed, device)
            if stats:
                routing.reset_stats()
            sec, out = timed(fn, sz["warmup"], sz["iters"])
            if task == "decode":
                res["tokens"] = out[:, sz["prompt"] :].cpu().tolist()
            res["tokens_per_s"] = tokens / sec
        elif task == "train":
            ids = qwen3.tokens(model.config.vocab_size, sz["batch"], sz["length"], seed=args.seed + 3).to(device)
            model.train()
            opt = torch.optim.AdamW(model.parameters(), lr=sz["lr"])
            losses = []

            def step():
                opt.zero_grad(set_to_none=True)
                with workloads.autocast(device, torch.bfloat16):
                    loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                opt.step()
                losses.append(loss.detach())

            if stats:
                routing.reset_stats()
            sec, _ = timed(step, sz["warmup"], sz["iters"])
            res["tokens_per_s"] = sz["batch"] * sz["length"] / sec
            res["losses"] = [float(x) for x in losses]
            del opt, losses
        else:
            raise ValueError(f"unknown task {task!r}")
        res["seconds"] = sec
        res["peak_bytes"] = workloads.peak_memory(device)
        if stats:
            rows = stats.stats()
            res["backends"] = stats.backends_used(rows)
            res["fallback_ops"] = [r.op for r in stats.fallbacks(rows)]
            res["top_ops"] = [[r.op, r.backend, r.calls] for r in rows[:8]]
        return res

    for task in args.tasks.split(","):
        try:
            res = run_task(task, sizes[task])
        except Exception as e:  # recorded as a result: the peer may simply not run this
            res = {"error": f"{type(e).__name__}: {str(e)[:800]}"}
        release()
        info["tasks"][task] = res
    info["torch_fl_imported"] = "torch_fl" in sys.modules
    if variant == "flagos_flaggems":
        used = set()
        for r in info["tasks"].values():
            used.update(r.get("backends", {}))
        if not any(b.startswith("flaggems") or b.startswith("flagos_python") for b in used):
            why = "FLAGOS_USE_FLAGGEMS=1 routed no operator to FlagGems"
            for r in info["tasks"].values():
                if "error" not in r:
                    r["error"] = why + "; these would be native-route numbers, not FlagGems"
    return info


# ----------------------------------------------------------------------------- orchestrator (parent)


def _variant_env(variant: str) -> dict:
    env = dict(os.environ)
    env.pop("FLAGOS_USE_FLAGGEMS", None)
    if variant == "flagos_flaggems":
        env["FLAGOS_USE_FLAGGEMS"] = "1"
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    return env


def _run_child(variant, args, ckpt, sizes, gpu: int | None = None) -> dict:
    """One child process for `variant` (on CUDA device `gpu` alone when given); its JSON result."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        variant,
        "--ckpt",
        ckpt,
        "--tasks",
        ",".join(args.tasks),
        "--sizes",
        json.dumps(sizes),
        "--dtype",
        args.dtype,
        "--seed",
        str(args.seed),
        "--paired",
        str(args.paired),
        "--step-pairs",
        str(args.step_pairs),
    ]
    env = _variant_env(variant)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.child_timeout, env=env, cwd=REPO)
    except subprocess.TimeoutExpired:
        out = {"variant": variant, "error": f"timed out after {args.child_timeout} s", "tasks": {}}
    else:
        lines = [ln[len(RESULT_TAG) :] for ln in proc.stdout.splitlines() if ln.startswith(RESULT_TAG)]
        if lines:
            out = json.loads(lines[-1])
        else:
            tail = (proc.stderr or proc.stdout)[-1500:]
            out = {"variant": variant, "error": f"child exited {proc.returncode} without a result: {tail}", "tasks": {}}
    out["wall_s"] = round(time.perf_counter() - t, 2)
    if gpu is not None:
        out["gpu"] = gpu
    return out


def _run_concurrently(jobs: list[tuple[str, int]], args, ckpt, sizes) -> list[dict]:
    """Children for (variant, GPU) pairs, all at once, each on its own GPU."""
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [pool.submit(_run_child, v, args, ckpt, sizes, gpu) for v, gpu in jobs]
        return [f.result() for f in futures]


def _concurrent_ratios(raw: list[dict], tasks: list[str]) -> dict:
    """flagos / native tokens/s of each round where the two ran at the same time on two GPUs."""
    out: dict = {}
    for t in tasks:
        ratios, native_tps, flagos_tps = [], [], []
        for r in sorted({x["round"] for x in raw if "gpu" in x}):
            got = {x["variant"]: x["tasks"].get(t, {}) for x in raw if x["round"] == r and "gpu" in x}
            n, f = got.get("native", {}), got.get("flagos", {})
            if "tokens_per_s" in n and "tokens_per_s" in f:
                ratios.append(f["tokens_per_s"] / n["tokens_per_s"])
                native_tps.append(n["tokens_per_s"])
                flagos_tps.append(f["tokens_per_s"])
        if ratios:
            out[t] = {
                "pairs": len(ratios),
                "ratio_median": statistics.median(ratios),
                "ratios": [round(x, 4) for x in ratios],
                "native_tokens_per_s": [round(x, 1) for x in native_tps],
                "flagos_tokens_per_s": [round(x, 1) for x in flagos_tps],
            }
    return out


def _available_variants(on_gpu: bool) -> tuple[list[str], dict]:
    skipped = {}
    if not on_gpu:
        for v in ("flagos_flaggems", "cuda_flaggems"):
            skipped[v] = "needs a CUDA GPU (FlagGems runs Triton kernels)"
    return [v for v in VARIANTS if v not in skipped], skipped


def _version(pkg: str) -> str | None:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def _summarise(raw: list[dict], variants: list[str], tasks: list[str]) -> dict:
    summary: dict = {}
    native_tokens = None
    for r in raw:
        if r["variant"] == "native" and "tokens" in r["tasks"].get("decode", {}):
            native_tokens = r["tasks"]["decode"]["tokens"]
            break
    for v in variants:
        for t in tasks:
            runs = [r["tasks"].get(t, {"error": r.get("error", "no result")}) for r in raw if r["variant"] == v]
            ok = [x for x in runs if "error" not in x and "tokens_per_s" in x]
            entry: dict = {"rounds_ok": len(ok), "rounds": len(runs)}
            errors = sorted({x["error"] for x in runs if "error" in x})
            if errors:
                entry["errors"] = errors
            if ok:
                entry["tokens_per_s"] = statistics.median(x["tokens_per_s"] for x in ok)
                entry["tokens_per_s_all"] = [round(x["tokens_per_s"], 2) for x in ok]
                peaks = [x["peak_bytes"] for x in ok if x.get("peak_bytes") is not None]
                entry["peak_bytes"] = max(peaks) if peaks else None
                if t == "decode" and native_tokens is not None:
                    entry["tokens_match_native"] = all(x["tokens"] == native_tokens for x in ok)
                fb = sorted({op for x in ok for op in x.get("fallback_ops", [])})
                if v.startswith("flagos"):
                    entry["fallback_ops"] = fb
                    entry["backends"] = ok[-1].get("backends", {})
            summary.setdefault(v, {})[t] = entry
    for per_task in summary.values():
        for t, e in per_task.items():
            base = summary.get("native", {}).get(t, {})
            if "tokens_per_s" in e and base.get("tokens_per_s"):
                e["ratio_to_native"] = e["tokens_per_s"] / base["tokens_per_s"]
            if e.get("peak_bytes") and base.get("peak_bytes"):
                e["peak_memory_ratio"] = e["peak_bytes"] / base["peak_bytes"]
    return summary


def _table(summary: dict, tasks: list[str]) -> str:
    lines = [
        "| variant | task | tokens/s (median) | ratio to native | peak memory (GiB) | memory ratio | greedy = native |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for v, per_task in summary.items():
        for t in tasks:
            e = per_task.get(t, {})
            if not e.get("rounds"):
                continue  # --rounds 0: the in-process pairs alone
            if "tokens_per_s" not in e:
                err = "; ".join(e.get("errors", ["no result"]))[:90].replace("|", "/")
                lines.append(f"| {v} | {t} | error: {err} | | | | |")
                continue
            ratio = f"{e['ratio_to_native']:.3f}x" if "ratio_to_native" in e else ""
            peak = f"{e['peak_bytes'] / 2**30:.2f}" if e.get("peak_bytes") else "n/a"
            mem = f"{e['peak_memory_ratio']:.3f}x" if "peak_memory_ratio" in e else ""
            match = {True: "yes", False: "NO"}.get(e.get("tokens_match_native"), "")
            lines.append(f"| {v} | {t} | {e['tokens_per_s']:,.1f} | {ratio} | {peak} | {mem} | {match} |")
    return "\n".join(lines) if len(lines) > 2 else "(no child rounds: --rounds 0)"


def _paired_brief(paired: dict) -> str:
    if "error" in paired:
        return f"error: {paired['error'][:200]}"
    parts = []
    for t, r in paired["tasks"].items():
        match = {True: ", greedy = native", False: ", greedy differs"}.get(r.get("tokens_match_native"), "")
        if t == "decode_tokens":
            alone = r["alone_ratio_median"]
            parts.append(
                f"decode token by token {r['ratio_median']:.3f}x (median of {r['pairs']} token pairs, "
                f"{r['ratio_of_sums']:.3f}x summed{match}; alone {alone:.3f}x)"
            )
        else:
            parts.append(f"{t} {r['ratio_median']:.3f}x (median of {r['pairs']} pairs{match})")
    return "; ".join(parts)


def _concurrent_brief(concurrent: dict) -> str:
    return "; ".join(f"{t} {r['ratio_median']:.3f}x (median of {r['pairs']} rounds)" for t, r in concurrent.items())


def _chart(
    summary: dict, tasks: list[str], path: Path, title: str, paired: dict | None = None, concurrent: dict | None = None
) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    # Each variant's ratio over the child rounds, and the median per-pair
    # ratio of the in-process pairs where they ran (the steadier number).
    series = {
        v: [summary[v].get(t, {}).get("ratio_to_native", 0.0) for t in tasks]
        for v in summary
        if any(summary[v].get(t, {}).get("rounds") for t in tasks)  # none with --rounds 0
    }
    pairs = (paired or {}).get("tasks", {})
    if set(pairs) & set(tasks):
        series["flagos, in-process pairs"] = [pairs.get(t, {}).get("ratio_median", 0.0) for t in tasks]
    if "decode_tokens" in pairs:
        by_token = pairs["decode_tokens"]["ratio_median"]
        series["flagos, token-by-token pairs"] = [by_token if t == "decode" else 0.0 for t in tasks]
    if concurrent:
        series["flagos, concurrent on two GPUs"] = [concurrent.get(t, {}).get("ratio_median", 0.0) for t in tasks]
    variants = list(series)
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / max(1, len(variants))
    for i, v in enumerate(variants):
        vals = series[v]
        xs = [j + (i - (len(variants) - 1) / 2) * width for j in range(len(tasks))]
        bars = ax.bar(xs, vals, width, label=v)
        for b, val, t in zip(bars, vals, tasks, strict=True):
            label = f"{val:.3f}" if val else ("error" if summary.get(v, {}).get(t, {}).get("errors") else "")
            ax.annotate(label, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=8)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_ylabel("tokens/s relative to native (higher is better)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def _parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="auto", help="tiny, 0.6b or a local HF checkpoint (default: 0.6b on a GPU)")
    p.add_argument("--rounds", type=int, default=3, help="rounds; each runs every variant once (default 3)")
    p.add_argument("--tasks", default=",".join(TASKS), help="comma list of decode,prefill,train")
    p.add_argument("--variants", default=None, help=f"comma list of {','.join(VARIANTS)} (default: all available)")
    p.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    p.add_argument("--dtype", default="auto", help="weights for decode/prefill: auto (bf16 on GPU) | float32 | ...")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"), help="output folder")
    p.add_argument("--name", default=None, help="output file stem (default e2e-<backing>-<model>[-quick])")
    p.add_argument("--deadline", type=float, default=None, help="start no round that would end after this many seconds")
    p.add_argument("--child-timeout", type=int, default=300, help="seconds per child process")
    p.add_argument(
        "--paired",
        type=int,
        default=0,
        help="also run decode and prefill on native and flagos in one process, alternating, for this many pairs "
        "(before the rounds; the steadier ratio on a shared machine)",
    )
    p.add_argument(
        "--step-pairs",
        type=int,
        default=0,
        metavar="N",
        help="also decode N sequences on native and flagos in one process, alternating token by token (one thread); "
        "reports the median per-token ratio and how fast each decodes alone",
    )
    p.add_argument(
        "--concurrent",
        action="store_true",
        help="on two GPUs: each round runs native and flagos at the same time, one per GPU, swapping GPUs each "
        "round; the median of the rounds' flagos/native ratios pairs training too (which --paired cannot)",
    )
    p.add_argument("--replot", metavar="JSON", help="only draw the PNG of this report again, beside it")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--ckpt", default=None, help=argparse.SUPPRESS)
    p.add_argument("--sizes", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _parse(argv)
    if args.replot:
        return replot(args.replot)
    if args.worker:
        worker = _paired_worker if args.worker == "paired" else _worker
        print(RESULT_TAG + json.dumps(worker(args)), flush=True)
        return 0

    sys.path.insert(0, str(MODELS_DIR))
    import qwen3
    import torch

    args.tasks = [t for t in args.tasks.split(",") if t]
    if bad := [t for t in args.tasks if t not in TASKS]:
        print(f"unknown task(s) {bad}; choose from {TASKS}", file=sys.stderr)
        return 2
    on_gpu = torch.cuda.is_available()
    backing = "cuda" if on_gpu else "cpu"
    variants, skipped = _available_variants(on_gpu)
    if args.variants:
        wanted = args.variants.split(",")
        if bad := [v for v in wanted if v not in VARIANTS]:
            print(f"unknown variant(s) {bad}; choose from {VARIANTS}", file=sys.stderr)
            return 2
        variants = [v for v in wanted if v in variants]
        skipped = {v: why for v, why in skipped.items() if v in wanted}
    if "native" not in variants:
        variants.insert(0, "native")  # ratios and token checks need it
    if args.concurrent and (torch.cuda.device_count() < 2 or "flagos" not in variants):
        print("--concurrent needs two CUDA GPUs and the flagos variant", file=sys.stderr)
        return 2
    spec = qwen3.canonical(args.model if args.model != "auto" else ("0.6b" if on_gpu else "tiny"))
    sizes = SIZES["quick" if args.quick else "full"]
    model_tag = spec if qwen3.is_builtin(spec) else Path(spec).name
    name = args.name or f"e2e-{backing}-{model_tag}{'-quick' if args.quick else ''}"
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    paired: dict | None = None

    def write_json(raw: list, rounds: int) -> tuple[dict, Path]:
        """The report so far (written after every round: a run cut short keeps what it measured)."""
        summary = _summarise(raw, variants, args.tasks)
        gpu = None
        if on_gpu:
            gpu = torch.cuda.get_device_name(0)
        report = {
            "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
            "argv": sys.argv,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "wall_s": round(time.perf_counter() - started, 1),
            "environment": {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "gpu": gpu,
                "cpu_count": os.cpu_count(),
                "transformers": _version("transformers"),
                "triton": _version("triton"),
                "flag_gems": _version("flag_gems") or _version("flag-gems"),
                "torch_fl_git": _git_rev(),
            },
            "backing": backing,
            "model": spec if qwen3.is_builtin(spec) else str(spec),
            "sizes": {t: sizes[t] for t in args.tasks},
            "rounds": rounds,
            "variants": variants,
            "skipped": skipped,
            "summary": summary,
            "paired": paired,
            "concurrent": _concurrent_ratios(raw, args.tasks) if args.concurrent else None,
            "raw": raw,
        }
        json_path = out_dir / f"{name}.json"
        json_path.write_text(json.dumps(report, indent=1) + "\n")
        return report, json_path

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="torch_fl_e2e_") as tmp:
        if qwen3.is_builtin(spec):
            print(f"building Qwen3 '{spec}' (seed {args.seed}) and saving it to a temporary checkpoint", flush=True)
            model = qwen3.build(spec, seed=args.seed)
            model.save_pretrained(tmp)
            del model
            ckpt = tmp
        else:
            ckpt = spec
        raw = []
        if (args.paired > 0 and {"decode", "prefill"} & set(args.tasks)) or (
            args.step_pairs > 0 and "decode" in args.tasks
        ):
            what = f"{args.paired} pairs" + (f", {args.step_pairs} sequences token by token" if args.step_pairs else "")
            print(f"paired: native and flagos alternating in one process, {what} ...", end=" ", flush=True)
            paired = _run_child("paired", args, ckpt, sizes)
            print(_paired_brief(paired), f"[{paired.get('wall_s', '?')} s]", flush=True)
        stop_at = started + args.deadline if args.deadline else float("inf")
        round_s = 0.0
        for r in range(args.rounds):
            if r > 0 and time.perf_counter() + round_s > stop_at:  # another round would end past the deadline
                print(f"deadline: stopping after {r} round(s)", flush=True)
                args.rounds = r
                break
            round_start = time.perf_counter()
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            if args.concurrent:
                # native and flagos at once, each on its own GPU, which they swap every round
                jobs = [("native", r % 2), ("flagos", 1 - r % 2)]
                print(f"round {r + 1}/{args.rounds}: native on GPU {r % 2}, flagos on GPU {1 - r % 2} ...", flush=True)
                for res in _run_concurrently(jobs, args, ckpt, sizes):
                    _record(raw, res, r, f"  {res['variant']}:")
                order = [v for v in order if v not in ("native", "flagos")]
            for v in order:
                print(f"round {r + 1}/{args.rounds}: {v} ...", end=" ", flush=True)
                _record(raw, _run_child(v, args, ckpt, sizes), r, "")
            round_s = time.perf_counter() - round_start
            write_json(raw, r + 1)

    report, json_path = write_json(raw, args.rounds)
    summary = report["summary"]
    png = _chart(summary, args.tasks, out_dir / f"{name}.png", _title(report), paired, report["concurrent"])
    print()
    print(_table(summary, args.tasks))
    if paired:
        print(f"\npaired in one process: {_paired_brief(paired)}")
    if report["concurrent"]:
        print(f"concurrent on two GPUs: {_concurrent_brief(report['concurrent'])}")
    for v, why in skipped.items():
        print(f"skipped {v}: {why}")
    print(f"\nwrote {json_path}" + (f" and {png}" if png else " (no PNG: matplotlib is not installed)"))
    print(f"total {report['wall_s']} s")
    return 0


def _record(raw: list, res: dict, round_index: int, prefix: str) -> None:
    res["round"] = round_index
    raw.append(res)
    brief = ", ".join(
        f"{t} {x['tokens_per_s']:.1f} tok/s" if "tokens_per_s" in x else f"{t} error" for t, x in res["tasks"].items()
    )
    print(prefix, brief or res.get("error", "no result")[:200], f"[{res.get('wall_s', '?')} s]", flush=True)


def _title(report: dict) -> str:
    rounds = max((s.get("rounds", 0) for v in report["summary"].values() for s in v.values()), default=0)
    where = report["environment"].get("gpu") or "host CPU"
    what = f"median of {rounds} rounds" if rounds else "in-process pairs"
    return f"Qwen3 {report['model']} on {where}, {what} ({report['date'][:10]})"


def replot(json_path: str) -> int:
    """Draws the PNG of a written report again (e.g. after the chart changed)."""
    report = json.loads(Path(json_path).read_text())
    tasks = list(report["sizes"])
    png = _chart(
        report["summary"],
        tasks,
        Path(json_path).with_suffix(".png"),
        _title(report),
        report.get("paired"),
        report.get("concurrent"),
    )
    print(f"wrote {png}" if png else "no PNG: matplotlib is not installed", file=sys.stderr if not png else sys.stdout)
    return 0 if png else 1


def _git_rev() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


if __name__ == "__main__":
    sys.exit(main())
