"""benchmarks/e2e.py's child processes: one variant's tasks, or native and flagos alternating in one process.

Run as `python -m benchmarks.e2e --worker VARIANT ...` (the parent never touches a device); the
child prints one line, RESULT_TAG followed by its JSON result.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

from benchmarks import common
from benchmarks.common import abba, abba_blocks, paired_seconds, ratio_stats

RESULT_TAG = "E2E_RESULT "


def inference_call(task: str, model, sz: dict, seed: int, device):
    """(fn, tokens per call) for decode, prefill or graphs (decode replaying CUDA graphs) on `model`
    (already on `device`)."""
    import qwen3
    import torch
    import workloads

    if task == "graphs":
        import graph_decode

        ids = qwen3.tokens(model.config.vocab_size, sz["batch"], sz["prompt"], seed=seed + 1).to(device)
        dec = graph_decode.GraphDecoder(model, sz["batch"], sz["prompt"] + sz["new_tokens"], device)
        return (lambda: dec.decode(ids, sz["new_tokens"])), sz["batch"] * sz["new_tokens"]
    if task == "decode":
        ids = qwen3.tokens(model.config.vocab_size, sz["batch"], sz["prompt"], seed=seed + 1).to(device)
        return (lambda: workloads.greedy(model, ids, sz["new_tokens"])), sz["batch"] * sz["new_tokens"]
    ids = qwen3.tokens(model.config.vocab_size, sz["batch"], sz["length"], seed=seed + 2).to(device)

    @torch.no_grad()
    def prefill():
        return model(input_ids=ids, use_cache=False, logits_to_keep=1).logits

    return prefill, sz["batch"] * sz["length"]


def paired_worker(args) -> dict:
    """Native and flagos in one process, alternating call by call (ABBA order).

    Machine load that drifts between child processes (a shared host) hits
    both devices of a pair alike, so the median of per-pair ratios is far steadier than a
    ratio of medians from different processes. Training is not paired with native: native
    CUDA backward fails once torch_fl is imported (PyTorch issue 161129); a routing variant's training
    pairs with flagos's native routes instead (train_route_pairs).
    """
    common.models()
    import qwen3
    import torch

    import torch_fl
    from torch_fl import routing
    from torch_fl.routing import config
    from torch_fl.routing import summary as stats

    native = torch.device("cuda", 0) if torch_fl.backing() == "cuda" else torch.device("cpu")
    flagos = torch.device("flagos", 0)
    dtype = infer_dtype(args, torch_fl.backing() == "cuda")
    sizes = json.loads(args.sizes)
    out: dict = {"variant": "paired", "pid": os.getpid(), "backing": torch_fl.backing(), "tasks": {}}
    out["routing_file"] = routing.config_file()  # e2e.py --paired-variants: how this child's flagos routes
    models = {d: qwen3.build(args.ckpt, dtype=dtype).to(d) for d in (native, flagos)}
    paired = ("decode", "prefill", "graphs") if torch_fl.backing() == "cuda" else ("decode", "prefill")
    seen: dict = {}  # replay's counts at the end of the tasks so far
    for task in [t for t in args.tasks.split(",") if t in paired and args.paired > 0]:
        try:
            routing.reset_stats()
            out["tasks"][task] = _pair_task(task, models, native, flagos, sizes[task], args)
            out["tasks"][task]["backends"] = stats.backends_used(stats.stats())  # the flagos calls, by backend
            now = replay_counts()
            if replayed := replay_since(now, seen):
                out["tasks"][task]["replay"] = replayed
            seen.update(now)
        except Exception as e:  # recorded as a result, as the child rounds do: the other tasks still pair
            out["tasks"][task] = {"error": f"{type(e).__name__}: {str(e)[:800]}"}
    if args.step_pairs > 0 and "decode" in args.tasks.split(","):
        out["tasks"]["decode_tokens"] = token_pairs(models, native, flagos, sizes["decode"], args)
    native_routes = config.default_file(torch_fl.backing(), False)
    if args.paired > 0 and "train" in args.tasks.split(",") and routing.config_file() != native_routes:
        del models
        try:
            out["tasks"]["train"] = train_route_pairs(args, sizes["train"], flagos, native_routes)
        except Exception as e:
            out["tasks"]["train"] = {"error": f"{type(e).__name__}: {str(e)[:800]}"}
    return out


def replay_counts() -> dict:
    """{op: {hits, recorded, python, evicted, reasons}} of FlagGems' record and replay, since the process began,
    for each operator that ran on it since the last reset of the routing statistics: calls that replayed,
    recorded a new signature, or stayed on FlagGems' Python function and why (torch_fl/replay)."""
    import torch_fl
    from torch_fl.routing import summary as stats

    out = {}
    for op in sorted({r.op for r in stats.stats() if r.backend == "flaggems"}):
        s = torch_fl._C.PyRoute(op).replay_stats()
        out[op] = {**{k: s[k] for k in ("hits", "recorded", "python", "evicted")}, "reasons": dict(s["reasons"])}
    return out


def replay_since(now: dict, before: dict) -> dict:
    """The counts of replay_counts() `now` less those of `before`, for operators with calls in between."""
    out = {}
    for op, c in now.items():
        was = before.get(op, {})
        d = {k: c[k] - was.get(k, 0) for k in ("hits", "recorded", "python", "evicted")}
        reasons = {why: n - was.get("reasons", {}).get(why, 0) for why, n in c["reasons"].items()}
        if d["hits"] or d["recorded"] or d["python"]:
            out[op] = {**d, "reasons": {why: n for why, n in reasons.items() if n}}
    return out


def train_route_pairs(args, sz: dict, flagos, native_routes: str) -> dict:
    """A routing variant's training step against flagos on its native routes (the shipped routing file),
    two copies of the model in one process, alternating (ABBA): the steady training figure that pairing
    with native CUDA cannot give (PyTorch issue 161129). Flagos's native routes run at native's speed (the
    flagos pairs show it), so the ratio stands for one against native. The routing file is swapped
    between the timed steps, never inside one."""
    import qwen3
    import torch
    import workloads

    from torch_fl import routing
    from torch_fl.routing import summary as stats

    sides = {}
    for side in ("native_routes", "routed"):
        model = qwen3.build(args.ckpt, dtype=torch.float32).to(flagos).train()
        sides[side] = (model, torch.optim.AdamW(model.parameters(), lr=sz["lr"]))
    vocab = sides["routed"][0].config.vocab_size
    ids = qwen3.tokens(vocab, sz["batch"], sz["length"], seed=args.seed + 3).to(flagos)

    def step(side: str) -> float:
        model, opt = sides[side]
        workloads.synchronize(flagos)
        t = time.perf_counter()
        workloads.train_step(model, opt, ids)
        workloads.synchronize(flagos)
        return time.perf_counter() - t

    def routes(side: str):
        return routing.using_config(native_routes, "default file") if side == "native_routes" else nullcontext()

    for side in sides:
        with routes(side):
            for _ in range(sz["warmup"]):
                step(side)
    # ABBA; each run of one side in a row follows an untimed step: swapping the routing file drops replay's
    # recordings of operators with size rules (a calibrated file's), which no timed step should pay.
    secs: dict = {"native_routes": [], "routed": []}
    for side, count in abba_blocks(args.paired, "native_routes", "routed"):
        with routes(side):
            step(side)
            secs[side].extend(step(side) for _ in range(count))
    before = replay_counts()  # every FlagGems operator the steps so far ran, with its counts
    routing.reset_stats()
    step("routed")  # one more, counted: which backends the routed step ran, and replay's counts
    replayed = replay_since(replay_counts(), before)
    ratios = [n / r for n, r in zip(secs["native_routes"], secs["routed"], strict=True)]
    tokens = sz["batch"] * sz["length"]
    return {
        **ratio_stats(ratios),
        "ratios": [round(r, 4) for r in ratios],
        "against": "flagos native routes",
        "native_tokens_per_s": tokens / statistics.median(secs["native_routes"]),
        "flagos_tokens_per_s": tokens / statistics.median(secs["routed"]),
        "backends": stats.backends_used(stats.stats()),
        **({"replay": replayed} if replayed else {}),
    }


def _pair_task(task: str, models: dict, native, flagos, sz: dict, args) -> dict:
    """One task's native/flagos pairs (ABBA), each call timed to its synchronisation."""
    import workloads

    calls = {d: inference_call(task, models[d], sz, args.seed, d) for d in models}
    tokens = calls[native][1]
    for d, (fn, _) in calls.items():
        for _ in range(sz["warmup"]):
            fn()
        workloads.synchronize(d)
    results: dict = {}
    secs = paired_seconds(
        {d: _keeping(results, d, calls[d][0]) for d in (native, flagos)}, args.paired, workloads.synchronize
    )
    ratios = [n / f for n, f in zip(secs[native], secs[flagos], strict=True)]
    res = {
        **ratio_stats(ratios),
        "ratios": [round(r, 4) for r in ratios],
        "native_tokens_per_s": tokens / statistics.median(secs[native]),
        "flagos_tokens_per_s": tokens / statistics.median(secs[flagos]),
    }
    if task in ("decode", "graphs"):
        res["tokens_match_native"] = results[native].cpu().tolist() == results[flagos].cpu().tolist()
    return res


def _keeping(results: dict, key, fn):
    """fn, with its last result kept in results[key] (the pairs compare native's and flagos's outputs)."""

    def call():
        results[key] = fn()

    return call


def token_pairs(models: dict, native, flagos, sz: dict, args) -> dict:
    """Decode on native and flagos alternating token by token in one thread.

    A generate() call lasts long enough for a shared host's load to change
    between the two calls of a pair; a decode step does not. Both models decode
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
            for d in abba(s * new + i, *devices):
                t = time.perf_counter()
                next(steps[d])
                workloads.synchronize(d)
                secs[d].append(time.perf_counter() - t)
        decoded = {d: workloads.run_steps(steps[d]).cpu().tolist() for d in devices}
        match = match and decoded[native] == decoded[flagos]
        for d in abba(s, *devices):
            t = time.perf_counter()
            workloads.run_steps(workloads.greedy_steps(models[d], ids[d], new))
            workloads.synchronize(d)
            alone[d].append(time.perf_counter() - t)
    ratios = [n / f for n, f in zip(secs[native], secs[flagos], strict=True)]
    tokens = sz["batch"] * new * args.step_pairs  # per device, alternating and alone alike
    alone_rate = {d: tokens / sum(alone[d]) for d in devices}
    return {
        **ratio_stats(ratios),
        "sequences": args.step_pairs,
        "ratio_of_sums": sum(secs[native]) / sum(secs[flagos]),
        "native_tokens_per_s": tokens / sum(secs[native]),
        "flagos_tokens_per_s": tokens / sum(secs[flagos]),
        "alone_native_tokens_per_s": alone_rate[native],
        "alone_flagos_tokens_per_s": alone_rate[flagos],
        "alone_ratio_median": statistics.median(n / f for n, f in zip(alone[native], alone[flagos], strict=True)),
        "tokens_match_native": match,
    }


def graph_decode_task(model, sz: dict, seed: int, device, timed, routing) -> dict:
    """Greedy decode with one CUDA graph per shape (graph_decode.GraphDecoder): the timed decodes replay
    the decode step captured on the first; the same steps run eagerly once, for the token check."""
    import graph_decode
    import qwen3

    ids = qwen3.tokens(model.config.vocab_size, sz["batch"], sz["prompt"], seed=seed + 1).to(device)
    max_len = sz["prompt"] + sz["new_tokens"]
    dec = graph_decode.GraphDecoder(model, sz["batch"], max_len, device)
    t = time.perf_counter()
    dec.decode(ids, sz["new_tokens"])  # captures the step, then decodes
    capture_s = time.perf_counter() - t
    eager = graph_decode.GraphDecoder(model, sz["batch"], max_len, device, graphs=False).decode(ids, sz["new_tokens"])
    sec, out = timed(lambda: dec.decode(ids, sz["new_tokens"]), sz["warmup"], sz["iters"])
    res = {
        "seconds": sec,
        "tokens": out[:, sz["prompt"] :].cpu().tolist(),
        "tokens_per_s": sz["batch"] * sz["new_tokens"] / sec,
        "tokens_match_eager": bool((out == eager).all()),
        "first_decode_s": round(capture_s, 3),
        "captures": dec.captures,
    }
    if routing is not None:  # flagos: what the graph captured, counted once at capture
        captured: dict = {}
        for (_, backend), n in dec.graph.captured_calls().items():
            captured[backend] = captured.get(backend, 0) + n
        res["captured_calls"] = captured
        res["replays"] = dec.graph.replays
    return res


def save_prompt_logits(model, sz: dict, seed: int, device, path: Path) -> dict:
    """The decode prompt's last-position logits (what the first greedy token is chosen from), saved in
    float32 on the host for the parent to compare with native's (e2e.py: _e2e_report.compare_logits)."""
    import qwen3
    import torch
    import workloads

    ids = qwen3.tokens(model.config.vocab_size, sz["batch"], sz["prompt"], seed=seed + 1).to(device)
    torch.save(workloads.last_logits(model, ids), path)
    return {"logits_file": str(path), "logits_dtype": str(model.dtype).removeprefix("torch.")}


def train_worker(args) -> None:
    """A training worker (e2e.py --paired, `--worker VARIANT --serve-train`): builds the model for its variant
    (native never imports torch_fl), warms up its training step, then serves timed samples of `iters` steps
    (benchmarks/common.py) until the parent closes its stdin."""
    common.models()
    import qwen3
    import torch
    import workloads

    if args.worker.startswith("flagos"):
        import torch_fl  # noqa: F401

        device = torch.device("flagos", 0)
    else:
        device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    sz = json.loads(args.sizes)["train"]
    model = qwen3.build(args.ckpt, dtype=torch.float32).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=sz["lr"])
    ids = qwen3.tokens(model.config.vocab_size, sz["batch"], sz["length"], seed=args.seed + 3).to(device)

    def step():
        workloads.train_step(model, opt, ids)

    for _ in range(sz["warmup"]):
        step()
    workloads.synchronize(device)
    common.serve(step, lambda: workloads.synchronize(device), sz["iters"])


def infer_dtype(args, on_gpu: bool):
    import torch

    if args.dtype == "auto":
        return torch.bfloat16 if on_gpu else torch.float32
    return getattr(torch, args.dtype)


def worker(args) -> dict:
    variant = args.worker
    common.models()
    import qwen3
    import torch
    import workloads

    info: dict = {"variant": variant, "pid": os.getpid(), "tasks": {}}
    stats = routing = None
    if variant in ("flagos", "flagos_flaggems", "flagos_calibrated"):
        import torch_fl
        from torch_fl import routing
        from torch_fl.routing import summary as stats

        device = torch.device("flagos", 0)
        info["backing"] = torch_fl.backing()
        info["routing_file"] = routing.config_file()  # flagos_calibrated: the calibrated file, loaded
    else:
        device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        info["backing"] = device.type
    if variant == "cuda_flaggems":
        import flag_gems

        flag_gems.enable()
        info["flag_gems"] = getattr(flag_gems, "__version__", "?")
    model_dtype = infer_dtype(args, info["backing"] == "cuda")
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
        model = load(torch.float32 if task == "train" else model_dtype)
        if task in ("decode", "prefill"):
            fn, tokens = inference_call(task, model, sz, args.seed, device)
            if stats:
                routing.reset_stats()
            sec, out = timed(fn, sz["warmup"], sz["iters"])
            if task == "decode":
                res["tokens"] = out[:, sz["prompt"] :].cpu().tolist()
            res["tokens_per_s"] = tokens / sec
        elif task == "graphs":
            res.update(graph_decode_task(model, sz, args.seed, device, timed, routing))
            sec = res.pop("seconds")
        elif task == "train":
            ids = qwen3.tokens(model.config.vocab_size, sz["batch"], sz["length"], seed=args.seed + 3).to(device)
            model.train()
            opt = torch.optim.AdamW(model.parameters(), lr=sz["lr"])
            losses = []

            def step():
                losses.append(workloads.train_step(model, opt, ids))

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
        if task == "decode" and args.logits_dir:  # after the statistics: this forward is not the benchmark's
            res.update(save_prompt_logits(model, sz, args.seed, device, Path(args.logits_dir) / f"{os.getpid()}.pt"))
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
