"""End-to-end benchmark: Qwen3 decode, prefill and training on flagos vs native PyTorch.

    python -m benchmarks.e2e                          # GPU: Qwen3-0.6B architecture, all variants
    python -m benchmarks.e2e --model tiny --quick     # host smoke run (written to the temporary folder)
    python -m benchmarks.e2e --variants native,flagos --paired 6 --step-pairs 4   # + in-process pairs

Tasks: decode, prefill, train, graphs (decode with CUDA graphs; needs a GPU), static_generate (Hugging Face's
generate() with a static cache, which transformers compiles with CUDA graphs on a GPU); sizes in SIZES. Variants: native
(never imports torch_fl), flagos (default routes), flagos_flaggems (FLAGOS_USE_FLAGGEMS=1), flagos_calibrated
(routed by --calibrated FILE). Every (round, variant) runs in a child process of its own (e2e_worker.py); the
parent never touches a device, compares each decode's prompt logits with native's, and writes the report after
every child. --paired N: native and each of --paired-variants alternating in one process (a routing variant's
training against flagos's native routes); --step-pairs N: decode token by token; --train-pairs N: native's and
flagos's training steps in worker processes of their own, taking turns. docs/benchmarks.md explains the figures.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import common
from benchmarks.common import exception_line

REPO = common.REPO
VARIANTS = ("native", "flagos", "flagos_flaggems", "flagos_calibrated")
PAIRABLE = ("flagos", "flagos_flaggems", "flagos_calibrated")  # flagos routings that share a process with native
TASKS = ("decode", "prefill", "train", "graphs", "static_generate")
HOST_TASKS = ("decode", "prefill", "train")  # graphs needs CUDA; static_generate compiles on a GPU only
DECODING = ("decode", "graphs", "static_generate")  # tasks whose tokens are compared with native's
SIZES = {
    "full": {
        "decode": {"batch": 1, "prompt": 32, "new_tokens": 64, "warmup": 1, "iters": 2},
        "prefill": {"batch": 8, "length": 512, "warmup": 2, "iters": 5},
        "train": {"batch": 4, "length": 512, "warmup": 2, "iters": 5, "lr": 1e-5},
        "graphs": {"batch": 1, "prompt": 32, "new_tokens": 64, "warmup": 1, "iters": 5},
        "static_generate": {"batch": 1, "prompt": 32, "new_tokens": 64, "warmup": 2, "iters": 5},
    },
    "quick": {
        "decode": {"batch": 1, "prompt": 8, "new_tokens": 8, "warmup": 1, "iters": 1},
        "prefill": {"batch": 2, "length": 32, "warmup": 1, "iters": 2},
        "train": {"batch": 2, "length": 32, "warmup": 1, "iters": 2, "lr": 1e-5},
        "graphs": {"batch": 1, "prompt": 8, "new_tokens": 8, "warmup": 1, "iters": 1},
        "static_generate": {"batch": 1, "prompt": 8, "new_tokens": 8, "warmup": 1, "iters": 1},
    },
}


def _variant_env(variant: str, calibrated: str | None = None) -> dict:
    """The child's environment: each flagos variant routes as its name says, whatever this shell sets."""
    env = {k: v for k, v in os.environ.items() if k not in ("FLAGOS_USE_FLAGGEMS", "FLAGOS_BACKEND_CONFIG")}
    if variant == "flagos_flaggems":
        env["FLAGOS_USE_FLAGGEMS"] = "1"
    elif variant == "flagos_calibrated":
        env["FLAGOS_BACKEND_CONFIG"] = calibrated
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    return env


def _run_child(variant, args, ckpt, sizes, routes: str | None = None) -> dict:
    """One child process for `variant` (routed as the variant `routes` says, default `variant`); its result."""
    job = {"ckpt": ckpt, "sizes": sizes, "tasks": args.tasks, "seed": args.seed, "logits_dir": args.logits_dir}
    cmd = common.child_cmd(
        "e2e_worker", variant, json.dumps({**job, "paired": args.paired, "step_pairs": args.step_pairs})
    )
    t = time.perf_counter()
    try:
        out = common.run_child(cmd, args.child_timeout, _variant_env(routes or variant, args.calibrated))
    except subprocess.TimeoutExpired:
        out = {"variant": variant, "error": f"timed out after {args.child_timeout} s", "tasks": {}}
    except RuntimeError as e:
        out = {"variant": variant, "error": str(e), "tasks": {}}
    out["wall_s"] = round(time.perf_counter() - t, 2)
    return out


def _train_workers(args, ckpt, sizes) -> dict:
    """Native's and flagos's training steps, each in a worker process of its own (native never imports torch_fl),
    taking turns: --train-pairs ABBA pairs of one sample (the median of --train-steps steps) from each."""
    job, t = json.dumps({"ckpt": ckpt, "sizes": sizes, "seed": args.seed, "serve_train": args.train_steps}), time.time()
    cmds = {v: (common.child_cmd("e2e_worker", v, job), _variant_env(v)) for v in ("native", "flagos")}
    with tempfile.TemporaryDirectory(prefix="torch_fl_e2e_train_") as tmp:
        try:
            res = common.worker_pairs(cmds, args.train_pairs, args.child_timeout, tmp)
            del res["ready"]
        except RuntimeError as e:
            return {"error": str(e)[-3000:]}
    tokens_ms = 1e3 * sizes["train"]["batch"] * sizes["train"]["length"]
    res |= {f"{v}_tokens_per_s": tokens_ms / statistics.median(res[f"{v}_ms"]) for v in ("native", "flagos")}
    return {"steps_per_sample": args.train_steps, **res, "wall_s": round(time.time() - t, 2)}


def _parse(argv=None):
    p = common.parser(__doc__.split("\n\n")[0], "e2e")
    p.add_argument("--model", default="auto", help="tiny, 0.6b or a local HF checkpoint (default: 0.6b on a GPU)")
    p.add_argument("--rounds", type=int, default=3, help="rounds; each runs every variant once (default 3)")
    p.add_argument("--tasks", help="comma list of decode,prefill,train,graphs (default: all; graphs needs CUDA)")
    p.add_argument("--variants", help=f"comma list of {','.join(VARIANTS)} (default: all available)")
    p.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deadline", type=float, help="start no child that would end after this many seconds")
    p.add_argument("--child-timeout", type=int, default=300, help="seconds per child process")
    p.add_argument("--paired", type=int, default=0, help="native/flagos pairs in one process, before the rounds")
    p.add_argument("--paired-variants", default="flagos", help=f"paired with native: comma list of {PAIRABLE}")
    p.add_argument("--step-pairs", type=int, default=0, metavar="N", help="N sequences paired token by token")
    p.add_argument("--train-pairs", type=int, default=0, metavar="N", help="N training pairs in worker processes")
    p.add_argument("--train-steps", type=int, default=5, help="training steps per sample of --train-pairs")
    p.add_argument("--calibrated", metavar="FILE", help="also run flagos_calibrated: flagos routed by this file")
    return p.parse_args(argv)


def _plan(args, on_gpu: bool) -> tuple[list[str], dict, list[str]] | str:
    """(variants, skipped, routings paired with native) from the arguments, or what is wrong with them."""
    args.tasks = [t for t in (args.tasks or ",".join(TASKS if on_gpu else HOST_TASKS)).split(",") if t]
    if bad := [t for t in args.tasks if t not in TASKS]:
        return f"unknown task(s) {bad}; choose from {TASKS}"
    if args.calibrated:
        if not Path(args.calibrated).is_file():
            return f"--calibrated {args.calibrated}: no such file (write one with python -m torch_fl calibrate)"
        args.calibrated = str(Path(args.calibrated).resolve())
    unavailable = {} if on_gpu else {"flagos_flaggems": "needs a CUDA GPU (FlagGems runs Triton kernels)"}
    if args.calibrated is None:
        unavailable["flagos_calibrated"] = "needs --calibrated FILE (a routing file from python -m torch_fl calibrate)"
    wanted = args.variants.split(",") if args.variants else list(VARIANTS)
    if bad := [v for v in wanted if v not in VARIANTS]:
        return f"unknown variant(s) {bad}; choose from {VARIANTS}"
    variants = [v for v in wanted if v not in unavailable]
    skipped = {v: why for v, why in unavailable.items() if v in wanted}
    if "native" not in variants:
        variants.insert(0, "native")  # ratios and token checks need it
    pair_with = [v for v in args.paired_variants.split(",") if v]
    if bad := [v for v in pair_with if v not in PAIRABLE]:
        return f"--paired-variants: cannot pair {bad}; choose from {PAIRABLE}"
    if "flagos_calibrated" in pair_with and not args.calibrated:
        return "--paired-variants flagos_calibrated needs --calibrated FILE"
    for v in [v for v in pair_with if v in unavailable]:
        print(f"not pairing {v}: {unavailable[v]}", file=sys.stderr)
        pair_with.remove(v)
    return variants, skipped, pair_with


def main(argv=None) -> int:
    args = _parse(argv)
    common.models()
    import qwen3
    import torch

    on_gpu = torch.cuda.is_available()
    plan = _plan(args, on_gpu)
    if isinstance(plan, str):
        print(plan, file=sys.stderr)
        return 2
    variants, skipped, pair_with = plan
    spec = qwen3.canonical(args.model if args.model != "auto" else ("0.6b" if on_gpu else "tiny"))
    sizes = SIZES["quick" if args.quick else "full"]
    json_path = common.out_path("e2e", args.out, smoke=args.quick)
    paired: dict | None = None  # native against flagos's native routes
    paired_routed: dict = {}  # native against each other flagos routing in --paired-variants
    train_workers: dict | None = None  # native's and flagos's training steps, worker processes taking turns

    def write_json(raw: list, rounds: int) -> dict:
        """The report so far (written after every child: a run cut short keeps what it measured)."""
        out = {
            "wall_s": round(time.perf_counter() - started, 1),
            "environment": {"platform": platform.platform(), "cpu_count": os.cpu_count()},
            "backing": "cuda" if on_gpu else "cpu",
            "model": spec if qwen3.is_builtin(spec) else str(spec),
            "sizes": {t: sizes[t] for t in args.tasks},
            "rounds": rounds,
            "variants": variants,
            "skipped": skipped,
            "summary": summarise(raw, variants, args.tasks),
            "paired": paired,
            "paired_routed": paired_routed,
            "train_workers": train_workers,
            # which file the calibrated variant measured: report.py notes when the committed one has changed
            "calibrated_sha256": args.calibrated and hashlib.sha256(Path(args.calibrated).read_bytes()).hexdigest(),
            "raw": raw,
        }
        common.write("e2e", out, json_path)
        return json.loads(json_path.read_text())

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="torch_fl_e2e_") as tmp:
        ckpt = spec
        if qwen3.is_builtin(spec):
            print(f"building Qwen3 '{spec}' (seed {args.seed}) and saving it to a temporary checkpoint", flush=True)
            qwen3.build(spec, seed=args.seed).save_pretrained(tmp)
            ckpt = tmp
        args.logits_dir = tempfile.mkdtemp(prefix="logits-", dir=tmp)  # each decode child's prompt logits
        reference: dict = {}  # native's, for compare_logits
        raw = []
        what = f"{args.paired} pairs" + (f", {args.step_pairs} sequences token by token" if args.step_pairs else "")
        # The deadline is judged before each child (each runs for minutes), the report written after each one.
        deadline = common.Deadline(args.deadline, started)

        def child(kind: str, step: str, say: str, v: str, routes: str | None = None, run=None) -> dict | None:
            """`v`'s child (or `run()`), or None where the deadline does not let it start (then nothing more does)."""
            if not deadline.allows(kind):
                print(f"deadline ({args.deadline:g} s): not starting {step} or anything after them", flush=True)
                return None
            print(say, end=" ", flush=True)
            t = time.perf_counter()
            res = run() if run else _run_child(v, args, ckpt, sizes, routes)
            deadline.took(kind, t)
            print(_brief(res), flush=True)
            return res

        stopped = False
        for v in pair_with:
            # a routing variant pairs its training step too (with flagos's native routes)
            pairable = {"decode", "prefill", "graphs", "static_generate"} | ({"train"} if v != "flagos" else set())
            if (args.paired > 0 and pairable & set(args.tasks)) or (args.step_pairs > 0 and "decode" in args.tasks):
                say = f"paired: native and {v} alternating in one process, {what} ..."
                if stopped := (res := child("paired", f"the pairs of {v}", say, "paired", v)) is None:
                    break
                if v == "flagos":
                    paired = res
                else:
                    paired_routed[v] = res
                write_json(raw, 0)
        if not stopped and args.train_pairs > 0 and "train" in args.tasks and "flagos" in variants:
            say = f"training: native and flagos in worker processes taking turns, {args.train_pairs} pairs ..."
            run = lambda: _train_workers(args, ckpt, sizes)  # noqa: E731
            stopped = (train_workers := child("train", "the training workers", say, "flagos", run=run)) is None
            write_json(raw, 0)
        for r in range(0 if stopped else args.rounds):
            for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
                res = child(v, f"{v} in round {r + 1}", f"round {r + 1}/{args.rounds}: {v} ...", v)
                if stopped := res is None:
                    break
                res["round"] = r
                compare_logits(res, reference)
                raw.append(res)
                write_json(raw, r + 1)
            if stopped:
                break
        args.rounds = len({x["round"] for x in raw})  # rounds begun (a deadline may stop them early)

    out = write_json(raw, args.rounds)
    print(f"wrote {json_path}\ntotal {out['wall_s']} s")
    return 0


def _brief(res: dict) -> str:
    """A child's errors, if any, and its wall time: its figures are in the report."""
    errors = [f"{t}: {exception_line(x['error'])}" for t, x in res.get("tasks", {}).items() if "error" in x]
    errors += [exception_line(res["error"])] if "error" in res else []
    return " ".join([*(e[:200] + ";" for e in errors), f"[{res.get('wall_s', '?')} s]"])


def compare_logits(res: dict, reference: dict) -> None:
    """A child's decode logits against native's first round's (`reference` keeps them), in place: the file gives
    way to logits_max_diff and logits_within_tolerance (workloads.LOGITS_TOLERANCE, the tests' tolerance)."""
    dec = res.get("tasks", {}).get("decode", {})
    path = dec.pop("logits_file", None)
    if path is None:
        return
    import torch

    common.models()
    import workloads

    logits = torch.load(path)
    Path(path).unlink()
    if res["variant"] == "native" and "logits" not in reference:
        reference["logits"] = logits
    ref = reference.get("logits")
    if ref is None:
        return  # native's first decode failed: nothing to compare with
    if logits.shape != ref.shape:
        dec["logits_within_tolerance"] = False
        dec["logits_error"] = f"shape {list(logits.shape)}, native's {list(ref.shape)}"
        return
    tol = workloads.LOGITS_TOLERANCE[getattr(torch, dec["logits_dtype"])]
    dec["logits_max_diff"] = float((logits - ref).abs().max())
    dec["logits_within_tolerance"] = bool(torch.allclose(logits, ref, **tol))


def _first_difference(runs: list[dict], native: list) -> int | None:
    """The first generated position (0-based) where any run's tokens leave native's, or None."""
    firsts = [
        next((i for i, (a, b) in enumerate(zip(row, ref, strict=True)) if a != b), None)
        for x in runs
        for row, ref in zip(x["tokens"], native, strict=True)
    ]
    firsts = [i for i in firsts if i is not None]
    return min(firsts) if firsts else None


def _round_entry(v: str, t: str, runs: list[dict], native_tokens: dict) -> dict:
    """One variant's task over the child rounds: median tokens/s, peak memory, tokens and logits against native."""
    ok = [x for x in runs if "error" not in x and "tokens_per_s" in x]
    entry: dict = {"rounds_ok": len(ok), "rounds": len(runs)}
    if errors := sorted({x["error"] for x in runs if "error" in x}):
        entry["errors"] = errors
    if not ok:
        return entry
    entry["tokens_per_s"] = statistics.median(x["tokens_per_s"] for x in ok)
    entry["tokens_per_s_all"] = [round(x["tokens_per_s"], 2) for x in ok]
    peaks = [x["peak_bytes"] for x in ok if x.get("peak_bytes") is not None]
    entry["peak_bytes"] = max(peaks) if peaks else None
    if t in native_tokens:
        entry["tokens_match_native"] = all(x["tokens"] == native_tokens[t] for x in ok)
        if not entry["tokens_match_native"]:
            entry["first_difference"] = _first_difference(ok, native_tokens[t])
    if diffs := [x["logits_max_diff"] for x in ok if "logits_max_diff" in x]:
        entry["logits_max_diff"] = max(diffs)
    if checked := [x["logits_within_tolerance"] for x in ok if "logits_within_tolerance" in x]:
        entry["logits_within_tolerance"] = all(checked)
    if t == "graphs":
        entry["tokens_match_eager"] = all(x.get("tokens_match_eager") for x in ok)
    if v.startswith("flagos"):
        entry["fallback_ops"] = sorted({op for x in ok for op in x.get("fallback_ops", [])})
        entry["backends"] = ok[-1].get("backends", {})
    return entry


def summarise(raw: list[dict], variants: list[str], tasks: list[str]) -> dict:
    native_tokens: dict = {}  # per decoding task: native's first round's tokens
    for r in raw:
        for t in DECODING:
            if r["variant"] == "native" and t not in native_tokens and "tokens" in r["tasks"].get(t, {}):
                native_tokens[t] = r["tasks"][t]["tokens"]

    def runs(v: str, t: str) -> list[dict]:
        return [r["tasks"].get(t, {"error": r.get("error", "no result")}) for r in raw if r["variant"] == v]

    summary = {v: {t: _round_entry(v, t, runs(v, t), native_tokens) for t in tasks} for v in variants}
    native = summary.get("native", {})
    for per_task in summary.values():
        for t, e in per_task.items():
            base, eager = native.get(t, {}), native.get("decode", {})
            if "tokens_per_s" in e and base.get("tokens_per_s"):
                e["ratio_to_native"] = e["tokens_per_s"] / base["tokens_per_s"]
            if t in DECODING[1:] and "tokens_per_s" in e and eager.get("tokens_per_s"):
                e["ratio_to_native_eager_decode"] = e["tokens_per_s"] / eager["tokens_per_s"]
            if e.get("peak_bytes") and base.get("peak_bytes"):
                e["peak_memory_ratio"] = e["peak_bytes"] / base["peak_bytes"]
        # Tokens that leave native's are explained where operators ran on other kernels (greedy decoding turns a
        # last-bit difference between near-tied logits into another token) while the logits agree within tolerance.
        for t in DECODING:
            e = per_task.get(t, {})
            if e.get("tokens_match_native") is False:
                other = sorted(b for b in e.get("backends", {}) if b != "native")
                e["tokens_explained"] = bool(other) and per_task["decode"].get("logits_within_tolerance") is True
                e["other_kernels"] = other
    return summary


if __name__ == "__main__":
    sys.exit(main())
