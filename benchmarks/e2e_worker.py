"""What one child process of benchmarks/e2e.py runs: `python -m benchmarks.e2e_worker VARIANT ...`, started by
e2e.py alone. VARIANT native, flagos, flagos_flaggems or flagos_calibrated runs that variant's tasks; `paired`
alternates native and flagos in one process; a job with `serve_train` serves the training step to the parent,
which has native's and flagos's take turns (e2e.py's --train-pairs)."""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import statistics
import sys
import time
from contextlib import nullcontext

from benchmarks import common
from benchmarks.common import abba, abba_blocks, paired_seconds, ratio_stats

REPLAY_KEYS = ("hits", "recorded", "python", "evicted")


def _error(e: Exception) -> dict:
    """A task's error, recorded as its result: the other tasks still run."""
    return {"error": f"{type(e).__name__}: {str(e)[:800]}"}


def _start(variant: str) -> tuple[dict, object, object]:
    """The child's result so far, its models' dtype, and torch_fl.routing (None on native: no torch_fl)."""
    common.models()
    import torch

    info: dict = {"variant": variant, "pid": os.getpid(), "tasks": {}}
    routing = None
    if variant == "native":
        info["backing"] = common.device(variant).type
    else:
        import torch_fl
        import torch_fl.routing.summary
        from torch_fl import routing

        info["backing"] = torch_fl.backing()
        info["routing_file"] = routing.config_file()  # how this child's flagos routes
    return info, torch.bfloat16 if info["backing"] == "cuda" else torch.float32, routing


def _prompt(model, sz: dict, seed: int, device):
    import qwen3

    return qwen3.tokens(model.config.vocab_size, sz["batch"], sz["prompt"], seed=seed + 1).to(device)


def _train_setup(args, sz: dict, device):
    """The training task's model (fp32 weights), AdamW and batch on `device`."""
    import qwen3
    import torch

    model = qwen3.build(args.ckpt, dtype=torch.float32).to(device).train()
    ids = qwen3.tokens(model.config.vocab_size, sz["batch"], sz["length"], seed=args.seed + 3).to(device)
    return model, torch.optim.AdamW(model.parameters(), lr=sz["lr"]), ids


def inference_call(task: str, model, sz: dict, seed: int, device):
    """(fn, tokens per call) for decode, prefill or graphs (decode replaying CUDA graphs) on `model`
    (already on `device`)."""
    import qwen3
    import torch
    import workloads

    if task == "graphs":
        import graph_decode

        ids = _prompt(model, sz, seed, device)
        dec = graph_decode.GraphDecoder(model, sz["batch"], sz["prompt"] + sz["new_tokens"], device)
        return (lambda: dec.decode(ids, sz["new_tokens"])), sz["batch"] * sz["new_tokens"]
    if task == "decode":
        ids = _prompt(model, sz, seed, device)
        return (lambda: workloads.greedy(model, ids, sz["new_tokens"])), sz["batch"] * sz["new_tokens"]
    if task == "static_generate":  # transformers compiles its forward (CUDA graphs) for its own device types, and
        # for flagos over a GPU with the transformers adapter, which a flagos user enables (docs/integrations.md)
        if device.type == "flagos":
            sys.modules["torch_fl"].integrations.enable("transformers")
        ids, n = _prompt(model, sz, seed, device), sz["new_tokens"]
        kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, cache_implementation="static")
        return (lambda: model.generate(ids, **kw)), sz["batch"] * n
    ids = qwen3.tokens(model.config.vocab_size, sz["batch"], sz["length"], seed=seed + 2).to(device)

    @torch.no_grad()
    def prefill():
        return model(input_ids=ids, use_cache=False, logits_to_keep=1).logits

    return prefill, sz["batch"] * sz["length"]


def paired_worker(args) -> dict:
    """Native and flagos in one process, alternating call by call (ABBA): load that drifts hits both alike.
    Training cannot pair with native here (PyTorch issue 161129): a routing variant's pairs with flagos's native
    routes instead (train_route_pairs)."""
    out, dtype, routing = _start("paired")
    import qwen3
    import torch

    from torch_fl.routing import config

    stats, cuda = routing.summary, out["backing"] == "cuda"
    native, flagos = torch.device("cuda", 0) if cuda else torch.device("cpu"), torch.device("flagos", 0)
    sizes, tasks = args.sizes, args.tasks
    models = {d: qwen3.build(args.ckpt, dtype=dtype).to(d) for d in (native, flagos)}
    paired = ("decode", "prefill", "graphs", "static_generate") if cuda else ("decode", "prefill")
    seen: dict = {}  # replay's counts at the end of the tasks so far
    for task in [t for t in tasks if t in paired and args.paired > 0]:
        try:
            routing.reset_stats()
            out["tasks"][task] = _pair_task(task, models, native, flagos, sizes[task], args)
            out["tasks"][task]["backends"] = stats.backends_used(stats.stats())  # the flagos calls, by backend
            now = replay_counts()
            if replayed := replay_since(now, seen):
                out["tasks"][task]["replay"] = replayed
            seen.update(now)
        except Exception as e:  # recorded as a result, as the child rounds do: the other tasks still pair
            out["tasks"][task] = _error(e)
    if args.step_pairs > 0 and "decode" in tasks:
        out["tasks"]["decode_tokens"] = token_pairs(models, native, flagos, sizes["decode"], args)
    native_routes = config.default_file(out["backing"], False)
    if args.paired > 0 and "train" in tasks and routing.config_file() != native_routes:
        del models
        try:
            out["tasks"]["train"] = train_route_pairs(args, sizes["train"], flagos, native_routes)
        except Exception as e:
            out["tasks"]["train"] = _error(e)
    return out


def replay_counts() -> dict:
    """{op: {hits, recorded, python, evicted, reasons}} of FlagGems' record and replay (torch_fl/replay) for each
    operator that ran on it since the routing statistics were reset."""
    import torch_fl
    from torch_fl.routing import summary as stats

    out = {}
    for op in sorted({r.op for r in stats.stats() if r.backend == "flaggems"}):
        s = torch_fl._C.PyRoute(op).replay_stats()
        out[op] = {**{k: s[k] for k in REPLAY_KEYS}, "reasons": dict(s["reasons"])}
    return out


def replay_since(now: dict, before: dict) -> dict:
    """The counts of replay_counts() `now` less those of `before`, for operators with calls in between."""
    out = {}
    for op, c in now.items():
        was = before.get(op, {})
        d = {k: c[k] - was.get(k, 0) for k in REPLAY_KEYS}
        reasons = {why: n - was.get("reasons", {}).get(why, 0) for why, n in c["reasons"].items()}
        if d["hits"] or d["recorded"] or d["python"]:
            out[op] = {**d, "reasons": {why: n for why, n in reasons.items() if n}}
    return out


def train_route_pairs(args, sz: dict, flagos, native_routes: str) -> dict:
    """A routing variant's training step against flagos on its native routes (which run at native's speed), two
    models in one process, alternating (ABBA); the routing file is swapped between timed steps, never inside."""
    import workloads

    from torch_fl import routing
    from torch_fl.routing import summary as stats

    sides = {side: _train_setup(args, sz, flagos) for side in ("native_routes", "routed")}

    def sync():
        workloads.synchronize(flagos)

    def step(side: str) -> float:
        sync()
        return common.timed_calls(lambda: workloads.train_step(*sides[side]), sync, 1)[0][0]

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
    tokens = sz["batch"] * sz["length"]
    return {
        **_pair_stats(secs["native_routes"], secs["routed"], tokens),
        "against": "flagos native routes",
        "backends": stats.backends_used(stats.stats()),
        **({"replay": replayed} if replayed else {}),
    }


def _pair_stats(native_s: list[float], flagos_s: list[float], tokens: int) -> dict:
    """The per-pair ratios native / flagos seconds, their statistics, and each side's median tokens/s."""
    ratios = [n / f for n, f in zip(native_s, flagos_s, strict=True)]
    return {
        **ratio_stats(ratios),
        "ratios": [round(r, 4) for r in ratios],
        "native_tokens_per_s": tokens / statistics.median(native_s),
        "flagos_tokens_per_s": tokens / statistics.median(flagos_s),
    }


def _pair_task(task: str, models: dict, native, flagos, sz: dict, args) -> dict:
    """One task's native/flagos pairs (ABBA), each call timed to its synchronisation."""
    import workloads

    calls = {d: inference_call(task, models[d], sz, args.seed, d) for d in models}
    for d, (fn, _) in calls.items():
        for _ in range(sz["warmup"]):
            fn()
        workloads.synchronize(d)
    results: dict = {}  # each side's last output: the pairs compare native's and flagos's

    def keeping(d):
        return lambda: results.__setitem__(d, calls[d][0]())

    secs = paired_seconds({d: keeping(d) for d in (native, flagos)}, args.paired, workloads.synchronize)
    res = _pair_stats(secs[native], secs[flagos], calls[native][1])
    if task in ("decode", "graphs", "static_generate"):
        res["tokens_match_native"] = results[native].cpu().tolist() == results[flagos].cpu().tolist()
    return res


def token_pairs(models: dict, native, flagos, sz: dict, args) -> dict:
    """Decode on native and flagos alternating token by token (greedy_steps(), ABBA), each step timed to its sync:
    a step is too short for the host's load to change within a pair."""
    import workloads

    devices = (native, flagos)
    ids = {d: _prompt(models[d], sz, args.seed, d) for d in devices}
    new = sz["new_tokens"]
    secs: dict = {d: [] for d in devices}
    match = True
    for d in devices:  # warm-up
        workloads.run_steps(workloads.greedy_steps(models[d], ids[d], new))
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
    ratios = [n / f for n, f in zip(secs[native], secs[flagos], strict=True)]
    tokens = sz["batch"] * new * args.step_pairs  # per device
    return {
        **ratio_stats(ratios),
        "sequences": args.step_pairs,
        "ratio_of_sums": sum(secs[native]) / sum(secs[flagos]),
        "native_tokens_per_s": tokens / sum(secs[native]),
        "flagos_tokens_per_s": tokens / sum(secs[flagos]),
        "tokens_match_native": match,
    }


def graph_decode(model, sz: dict, seed: int, device, flagos: bool):
    """(fn, tokens per call, its result so far, what to add after the timed calls) of greedy decode replaying the
    step captured on the first decode (graph_decode.GraphDecoder); the eager decode's tokens, to compare with."""
    import graph_decode

    ids = _prompt(model, sz, seed, device)
    max_len, new = sz["prompt"] + sz["new_tokens"], sz["new_tokens"]
    dec = graph_decode.GraphDecoder(model, sz["batch"], max_len, device)
    t = time.perf_counter()
    dec.decode(ids, new)  # captures the step, then decodes
    res = {"first_decode_s": round(time.perf_counter() - t, 3), "captures": dec.captures}
    res["eager"] = graph_decode.GraphDecoder(model, sz["batch"], max_len, device, graphs=False).decode(ids, new)
    if flagos:  # what the graph captured, counted once at capture
        captured: dict = {}
        for (_, backend), n in dec.graph.captured_calls().items():
            captured[backend] = captured.get(backend, 0) + n
        res["captured_calls"] = captured
    return (
        (lambda: dec.decode(ids, new)),
        sz["batch"] * new,
        res,
        lambda: {"replays": dec.graph.replays} if flagos else {},
    )


def worker(args) -> dict:
    """One variant's tasks, each on a model loaded afresh, timed to the device's synchronisation."""
    info, dtype, routing = _start(args.variant)
    import qwen3
    import torch
    import workloads

    device, stats = common.device(args.variant), routing and routing.summary

    def timed(fn, warmup, iters):
        for _ in range(warmup):
            fn()
        workloads.synchronize(device)
        times, out = common.timed_calls(fn, lambda: workloads.synchronize(device), iters)
        return statistics.median(times), out

    def run_task(task: str, sz: dict) -> dict:
        res: dict = {}
        workloads.reset_peak_memory(device)
        if task == "train":
            model, opt, ids = _train_setup(args, sz, device)
            losses: list = []
            fn, tokens = (lambda: losses.append(workloads.train_step(model, opt, ids))), sz["batch"] * sz["length"]
        else:
            model = qwen3.build(args.ckpt, dtype=dtype).to(device)
            if task == "graphs":
                fn, tokens, res, after = graph_decode(model, sz, args.seed, device, stats is not None)
            else:
                fn, tokens = inference_call(task, model, sz, args.seed, device)
        if routing and task != "graphs":
            routing.reset_stats()
        sec, out = timed(fn, sz["warmup"], sz["iters"])
        if task == "train":
            res["losses"] = [float(x) for x in losses]
        if task in ("decode", "graphs", "static_generate"):
            res["tokens"] = out[:, sz["prompt"] :].cpu().tolist()
        if task == "graphs":
            res.update(tokens_match_eager=bool((out == res.pop("eager")).all()), **after())
        res.update(tokens_per_s=tokens / sec, seconds=sec, peak_bytes=workloads.peak_memory(device))
        if stats:
            rows = stats.stats()
            res["backends"] = stats.backends_used(rows)
            res["fallback_ops"] = [r.op for r in stats.fallbacks(rows)]
        if task == "decode" and args.logits_dir:  # after the statistics: this forward is not the benchmark's
            # the prompt's last-position logits, for the parent to compare with native's (e2e.compare_logits)
            path = os.path.join(args.logits_dir, f"{os.getpid()}.pt")
            torch.save(workloads.last_logits(model, _prompt(model, sz, args.seed, device)), path)
            res.update(logits_file=path, logits_dtype=str(model.dtype).removeprefix("torch."))
        return res

    for task in args.tasks:
        try:
            res = run_task(task, args.sizes[task])
        except Exception as e:  # recorded as a result: the peer may simply not run this
            res = _error(e)
        gc.collect()  # what the task left behind, before the next one loads its model
        if device.type != "cpu":
            workloads.device_module(device).empty_cache()
        info["tasks"][task] = res
    info["torch_fl_imported"] = "torch_fl" in sys.modules
    if args.variant == "flagos_flaggems":
        used = {b for r in info["tasks"].values() for b in r.get("backends", {})}
        if not any(b.startswith("flaggems") or b.startswith("flagos_python") for b in used):
            why = "FLAGOS_USE_FLAGGEMS=1 routed no operator to FlagGems"
            for r in info["tasks"].values():
                if "error" not in r:
                    r["error"] = why + "; these would be native-route numbers, not FlagGems"
    return info


def train_server(args) -> None:
    """The training step of --variant (native or flagos), warm, then timed `serve_train` steps per request:
    native's and flagos's workers take turns (native CUDA backward fails in a process that imported torch_fl,
    PyTorch issue 161129, so the two cannot pair in one process)."""
    info, _, _ = _start(args.variant)
    import workloads

    device, sz = common.device(args.variant), args.sizes["train"]
    step = functools.partial(workloads.train_step, *_train_setup(args, sz, device))
    for _ in range(sz["warmup"]):
        step()
    common.serve(step, functools.partial(workloads.synchronize, device), args.serve_train, info)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("variant", help="native, flagos, flagos_flaggems, flagos_calibrated, or paired")
    p.add_argument("job", type=json.loads, help="JSON: ckpt, sizes, tasks, seed, paired, step_pairs, logits_dir")
    parsed = p.parse_args(argv)
    args = argparse.Namespace(variant=parsed.variant, **parsed.job)
    if getattr(args, "serve_train", 0):
        return train_server(args) or 0
    common.reply((paired_worker if args.variant == "paired" else worker)(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
