"""End-to-end benchmark: Qwen3 decode, prefill and training on flagos vs native PyTorch.

    python -m benchmarks.e2e                          # GPU: Qwen3-0.6B architecture, all variants
    python -m benchmarks.e2e --model tiny --quick     # host smoke run (written to the temporary folder)
    python -m benchmarks.e2e --model /path/to/Qwen3-0.6B --rounds 5
    python -m benchmarks.e2e --variants native,flagos --paired 6   # + in-process pairs
    python -m benchmarks.e2e --variants native,flagos --concurrent  # two GPUs: native and flagos at once
    python -m benchmarks.e2e --tasks decode --variants native,flagos --step-pairs 12  # token by token
    python -m benchmarks.e2e --tasks decode,graphs --variants native,flagos,flagos_flaggems --rounds 5  # graphs
    python -m benchmarks.e2e --replot benchmarks/results/e2e-h200.json   # the chart again

Tasks (full sizes): decode (batch 1, 32-token prompt, 64 new tokens, greedy),
prefill (8 x 512 tokens, one forward pass, logits of the last position as
generate() computes them), train (4 x 512, AdamW, bf16 autocast, fp32 weights),
graphs (decode's sizes with CUDA graphs: transformers' static KV cache, one
decode step captured per shape and replayed per token, torch.cuda's graphs on
native and torch.flagos's on flagos; torch_fl/models/graph_decode.py; needs a
GPU). The graphs task's ratio_to_native is to native graph decode, its
ratio_to_native_eager_decode to native's decode task.
Decode and prefill run the model in bf16 on a GPU (fp32 on host memory).

Variants:
  native           PyTorch on the backing device (cuda, or cpu on host memory); never imports torch_fl
  flagos           flagos with the default (native) routes
  flagos_flaggems  flagos with FLAGOS_USE_FLAGGEMS=1 (the FlagGems profile)
  flagos_calibrated flagos routed by --calibrated FILE (FLAGOS_BACKEND_CONFIG: a file written by
                   `python -m torch_fl calibrate`); run only when --calibrated is given
  cuda_flaggems    native cuda under flag_gems.enable() (FlagGems replaces CUDA kernels process-wide)

The parent never touches a device. Every (round, variant) runs in its own child
process (`python -m benchmarks.e2e --worker VARIANT ...`) that prints one JSON
line, so variants that cannot share a process (native CUDA autograd after
torch_fl is imported, PyTorch issue 161129; flag_gems.enable()) are measured
the same way as the others. Rounds alternate between variants, rotating the
order each round. Errors are recorded as results. Built-in models get random
weights from --seed and are saved once to a temporary checkpoint that every
child loads, so all variants hold identical weights.

Each decode child also saves its prompt's last-position logits; the parent compares them with native's
first round's under the tests' tolerance for the dtype (logits_max_diff, logits_within_tolerance). Tokens
that leave native's get first_difference and tokens_explained: explained when operators ran on other
kernels than native (FlagGems rounds differently) and the logits agree; with native kernels only, any
difference is a defect.

--paired N first runs decode and prefill (and graphs, on a GPU) on native
and flagos in one child process, alternating call by call for N pairs: on a
shared machine whose load drifts between processes, the median of per-pair
ratios is the steadier number. Training cannot pair in one process (native CUDA backward fails once
torch_fl is imported): with "train" in --tasks, a native training worker process and a flagos one
(benchmarks/common.py) build their models once and take turns, N ABBA pairs of samples of the
training step. --paired-variants pairs each flagos routing listed (flagos_flaggems,
flagos_calibrated) with native the same way, each in a process of its own (and a training worker of its
own), and also pairs its training step in one process with flagos on its native routes (the shipped
routing file swapped in between steps). --concurrent (two GPUs) pairs all three tasks another way:
each round runs the native and the flagos child at the same time, one per
GPU, swapping GPUs every round, so load on the shared host hits both alike;
the median of the rounds' ratios is reported beside the other numbers.
--step-pairs N decodes N sequences on native and flagos in one process and
one thread, alternating token by token (workloads.greedy_steps(): the
forward calls generate() makes), and also decodes each sequence with each
model alone, so the report shows whether alternating slowed the steps.

Writes benchmarks/results/e2e-<machine>.json (benchmarks/common.py: the
command, date, versions and commit with the results; --out redirects it, to a
folder or a file) and the .png beside it (if matplotlib is installed), and
prints a Markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks import _e2e_child, _e2e_report, common

REPO = common.REPO
RESULT_TAG = _e2e_child.RESULT_TAG
VARIANTS = ("native", "flagos", "flagos_flaggems", "flagos_calibrated", "cuda_flaggems")
PAIRABLE = ("flagos", "flagos_flaggems", "flagos_calibrated")  # flagos routings that share a process with native
TASKS = ("decode", "prefill", "train", "graphs")
HOST_TASKS = ("decode", "prefill", "train")  # graphs needs CUDA
SIZES = {
    "full": {
        "decode": {"batch": 1, "prompt": 32, "new_tokens": 64, "warmup": 1, "iters": 2},
        "prefill": {"batch": 8, "length": 512, "warmup": 2, "iters": 5},
        "train": {"batch": 4, "length": 512, "warmup": 2, "iters": 5, "lr": 1e-5},
        "graphs": {"batch": 1, "prompt": 32, "new_tokens": 64, "warmup": 1, "iters": 5},
    },
    "quick": {
        "decode": {"batch": 1, "prompt": 8, "new_tokens": 8, "warmup": 1, "iters": 1},
        "prefill": {"batch": 2, "length": 32, "warmup": 1, "iters": 2},
        "train": {"batch": 2, "length": 32, "warmup": 1, "iters": 2, "lr": 1e-5},
        "graphs": {"batch": 1, "prompt": 8, "new_tokens": 8, "warmup": 1, "iters": 1},
    },
}


def _variant_env(variant: str, calibrated: str | None = None) -> dict:
    """The child's environment: each flagos variant routes as its name says, whatever this shell sets."""
    env = dict(os.environ)
    env.pop("FLAGOS_USE_FLAGGEMS", None)
    env.pop("FLAGOS_BACKEND_CONFIG", None)
    if variant == "flagos_flaggems":
        env["FLAGOS_USE_FLAGGEMS"] = "1"
    if variant == "flagos_calibrated":
        env["FLAGOS_BACKEND_CONFIG"] = calibrated
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    return env


def _run_child(variant, args, ckpt, sizes, gpu: int | None = None, routes: str | None = None) -> dict:
    """One child process for `variant` (on CUDA device `gpu` alone when given; routed as the variant `routes`
    says, default `variant`); its JSON result."""
    cmd = [
        *common.child_cmd("e2e"),
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
    cmd += ["--logits-dir", args.logits_dir] if args.logits_dir else []
    env = _variant_env(routes or variant, args.calibrated)
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
            text = proc.stderr or proc.stdout
            error = f"child exited {proc.returncode} without a result: {common.exception_line(text)}\n{text[-1500:]}"
            out = {"variant": variant, "error": error, "tasks": {}}
    out["wall_s"] = round(time.perf_counter() - t, 2)
    if gpu is not None:
        out["gpu"] = gpu
    return out


def _train_worker_pairs(routings: list[str], args, ckpt, sizes, tmp: str) -> dict:
    """{routing: pairs} of the training step: a native worker process (never imports torch_fl) against a
    worker per flagos routing in turn, ABBA samples of `iters` steps (benchmarks/common.py: native CUDA
    backward cannot share a process with torch_fl)."""
    cmd = common.child_cmd("e2e", "--ckpt", ckpt, "--sizes", json.dumps(sizes))
    cmd += ["--seed", str(args.seed), "--serve-train", "--worker"]

    def start(v: str) -> common.Worker:
        log = os.path.join(tmp, f"train-worker-{v}.log")
        return common.Worker(f"train ({v})", [*cmd, v], _variant_env(v, args.calibrated), REPO, log, args.child_timeout)

    sz = sizes["train"]
    tokens = sz["batch"] * sz["length"]
    out = common.pair_each(start, "native", routings, args.paired)
    for res in out.values():
        if "error" not in res:
            res.update(against="native, worker processes", steps_per_sample=sz["iters"])
            res["native_tokens_per_s"] = tokens / statistics.median(res.pop("native_s"))
            res["flagos_tokens_per_s"] = tokens / statistics.median(res.pop("flagos_s"))
    return out


def _run_concurrently(jobs: list[tuple[str, int]], args, ckpt, sizes) -> list[dict]:
    """Children for (variant, GPU) pairs, all at once, each on its own GPU."""
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [pool.submit(_run_child, v, args, ckpt, sizes, gpu) for v, gpu in jobs]
        return [f.result() for f in futures]


def _available_variants(on_gpu: bool, calibrated: str | None = None) -> tuple[list[str], dict]:
    skipped = {}
    if not on_gpu:
        for v in ("flagos_flaggems", "cuda_flaggems"):
            skipped[v] = "needs a CUDA GPU (FlagGems runs Triton kernels)"
    if calibrated is None:
        skipped["flagos_calibrated"] = "needs --calibrated FILE (a routing file from python -m torch_fl calibrate)"
    return [v for v in VARIANTS if v not in skipped], skipped


def _parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="auto", help="tiny, 0.6b or a local HF checkpoint (default: 0.6b on a GPU)")
    p.add_argument("--rounds", type=int, default=3, help="rounds; each runs every variant once (default 3)")
    p.add_argument(
        "--tasks",
        default=None,
        help="comma list of decode,prefill,train,graphs (default: all on a GPU; graphs needs CUDA)",
    )
    p.add_argument("--variants", default=None, help=f"comma list of {','.join(VARIANTS)} (default: all available)")
    p.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    p.add_argument("--dtype", default="auto", help="weights for decode/prefill: auto (bf16 on GPU) | float32 | ...")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--out",
        default=None,
        help="JSON path, or a folder for e2e-<machine>.json (default benchmarks/results/e2e-<machine>.json)",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="start no child (a pairing, a variant's round) that, as long as the last of its kind, would end after "
        "this many seconds",
    )
    p.add_argument("--child-timeout", type=int, default=300, help="seconds per child process")
    p.add_argument(
        "--paired",
        type=int,
        default=0,
        help="also run decode, prefill and graphs on native and flagos in one process, alternating, for this many "
        "pairs (before the rounds; the steadier ratio on a shared machine)",
    )
    p.add_argument(
        "--paired-variants",
        default="flagos",
        help="the flagos variants that --paired and --step-pairs pair with native, each in a process of its own "
        f"(comma list of {','.join(PAIRABLE)}; default flagos)",
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
    p.add_argument(
        "--calibrated",
        metavar="FILE",
        help="also run the flagos_calibrated variant: flagos routed by this file (python -m torch_fl calibrate)",
    )
    p.add_argument("--replot", metavar="JSON", help="only draw the PNG of this report again, beside it")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--ckpt", default=None, help=argparse.SUPPRESS)
    p.add_argument("--sizes", default=None, help=argparse.SUPPRESS)
    p.add_argument("--logits-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--serve-train", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _parse(argv)
    if args.replot:
        return replot(args.replot)
    if args.worker and args.serve_train:
        _e2e_child.train_worker(args)
        return 0
    if args.worker:
        worker = _e2e_child.paired_worker if args.worker == "paired" else _e2e_child.worker
        print(RESULT_TAG + json.dumps(worker(args)), flush=True)
        return 0

    common.models()
    import qwen3
    import torch

    on_gpu = torch.cuda.is_available()
    args.tasks = [t for t in (args.tasks or ",".join(TASKS if on_gpu else HOST_TASKS)).split(",") if t]
    if bad := [t for t in args.tasks if t not in TASKS]:
        print(f"unknown task(s) {bad}; choose from {TASKS}", file=sys.stderr)
        return 2
    backing = "cuda" if on_gpu else "cpu"
    if args.calibrated:
        calibrated = Path(args.calibrated).resolve()
        if not calibrated.is_file():
            print(
                f"--calibrated {args.calibrated}: no such file (write one with python -m torch_fl calibrate)",
                file=sys.stderr,
            )
            return 2
        args.calibrated = str(calibrated)
    variants, skipped = _available_variants(on_gpu, args.calibrated)
    unavailable = dict(skipped)  # before --variants narrows them: --paired-variants may name others
    if args.variants:
        wanted = args.variants.split(",")
        if bad := [v for v in wanted if v not in VARIANTS]:
            print(f"unknown variant(s) {bad}; choose from {VARIANTS}", file=sys.stderr)
            return 2
        variants = [v for v in wanted if v in variants]
        skipped = {v: why for v, why in skipped.items() if v in wanted}
    if "native" not in variants:
        variants.insert(0, "native")  # ratios and token checks need it
    pair_with = [v for v in args.paired_variants.split(",") if v]
    if bad := [v for v in pair_with if v not in PAIRABLE]:
        print(f"--paired-variants: cannot pair {bad}; choose from {PAIRABLE}", file=sys.stderr)
        return 2
    if "flagos_calibrated" in pair_with and not args.calibrated:
        print("--paired-variants flagos_calibrated needs --calibrated FILE", file=sys.stderr)
        return 2
    for v in [v for v in pair_with if v in unavailable]:
        print(f"not pairing {v}: {unavailable[v]}", file=sys.stderr)
        pair_with.remove(v)
    if args.concurrent and (torch.cuda.device_count() < 2 or "flagos" not in variants):
        print("--concurrent needs two CUDA GPUs and the flagos variant", file=sys.stderr)
        return 2
    spec = qwen3.canonical(args.model if args.model != "auto" else ("0.6b" if on_gpu else "tiny"))
    sizes = SIZES["quick" if args.quick else "full"]
    json_path = common.out_path("e2e", args.out, smoke=args.quick)
    paired: dict | None = None  # native against flagos's native routes
    paired_routed: dict = {}  # native against each other flagos routing in --paired-variants

    def write_json(raw: list, rounds: int) -> dict:
        """The report so far (written after every round: a run cut short keeps what it measured)."""
        report = {
            "wall_s": round(time.perf_counter() - started, 1),
            "environment": {"platform": platform.platform(), "cpu_count": os.cpu_count()},
            "backing": backing,
            "model": spec if qwen3.is_builtin(spec) else str(spec),
            "sizes": {t: sizes[t] for t in args.tasks},
            "rounds": rounds,
            "variants": variants,
            "skipped": skipped,
            "summary": _e2e_report.summarise(raw, variants, args.tasks),
            "paired": paired,
            "paired_routed": paired_routed,
            # which file the calibrated variant measured: report.py notes when the committed one has changed
            "calibrated_sha256": _sha256(args.calibrated) if args.calibrated else None,
            "concurrent": _e2e_report.concurrent_ratios(raw, args.tasks) if args.concurrent else None,
            "raw": raw,
        }
        common.write("e2e", report, json_path)
        return json.loads(json_path.read_text())

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
        args.logits_dir = tempfile.mkdtemp(prefix="logits-", dir=tmp)  # each decode child's prompt logits
        reference: dict = {}  # native's, for compare_logits
        raw = []
        what = f"{args.paired} pairs" + (f", {args.step_pairs} sequences token by token" if args.step_pairs else "")
        # Each child runs for tens of seconds to minutes: the deadline is judged before each one, and the
        # report is written after each one, so a run stopped early, or killed, keeps what it measured.
        deadline = common.Deadline(args.deadline, started)

        def may_start(kind: str, step: str) -> bool:
            if deadline.allows(kind):
                return True
            print(f"deadline ({args.deadline:g} s): not starting {step}", flush=True)
            return False

        stopped = False
        for v in pair_with:
            # a routing variant pairs its training step too (with flagos's native routes)
            pairable = {"decode", "prefill", "graphs"} | ({"train"} if v != "flagos" else set())
            if (args.paired > 0 and pairable & set(args.tasks)) or (args.step_pairs > 0 and "decode" in args.tasks):
                if not may_start("paired", f"the pairs of {v} or anything after them"):
                    stopped = True
                    break
                print(f"paired: native and {v} alternating in one process, {what} ...", end=" ", flush=True)
                t = time.perf_counter()
                res = _run_child("paired", args, ckpt, sizes, routes=v)
                deadline.took("paired", t)
                print(_e2e_report.paired_brief(res), f"[{res.get('wall_s', '?')} s]", flush=True)
                if v == "flagos":
                    paired = res
                else:
                    paired_routed[v] = res
                write_json(raw, 0)
        if not stopped and args.paired > 0 and "train" in args.tasks and pair_with:
            stopped = not may_start("train_workers", "the training pairs or anything after them")
            t = time.perf_counter()
            for v, res in ({} if stopped else _train_worker_pairs(pair_with, args, ckpt, sizes, tmp)).items():
                if v == "flagos":
                    paired = home = paired or {"variant": "paired", "tasks": {}}
                else:
                    home = paired_routed.setdefault(v, {"variant": "paired", "tasks": {}})
                home["tasks"]["train_native"] = res
                print(f"{v} and native in worker processes:", _e2e_report.paired_brief({"tasks": {"train": res}}))
            deadline.took("train_workers", t)
            write_json(raw, 0)
        for r in range(0 if stopped else args.rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            if args.concurrent:
                if not may_start("concurrent", f"round {r + 1}"):
                    break
                # native and flagos at once, each on its own GPU, which they swap every round
                jobs = [("native", r % 2), ("flagos", 1 - r % 2)]
                print(f"round {r + 1}/{args.rounds}: native on GPU {r % 2}, flagos on GPU {1 - r % 2} ...", flush=True)
                t = time.perf_counter()
                for res in _run_concurrently(jobs, args, ckpt, sizes):
                    _record(raw, res, r, f"  {res['variant']}:", reference)
                deadline.took("concurrent", t)
                order = [v for v in order if v not in ("native", "flagos")]
            for v in order:
                if not may_start(v, f"{v} in round {r + 1} or anything after it"):
                    stopped = True
                    break
                print(f"round {r + 1}/{args.rounds}: {v} ...", end=" ", flush=True)
                t = time.perf_counter()
                _record(raw, _run_child(v, args, ckpt, sizes), r, "", reference)
                deadline.took(v, t)
                write_json(raw, r + 1)
            if stopped:
                break
        args.rounds = len({x["round"] for x in raw})  # rounds begun (a deadline may stop them early)

    report = write_json(raw, args.rounds)
    summary = report["summary"]
    png = _e2e_report.chart(
        summary, args.tasks, json_path.with_suffix(".png"), _e2e_report.title(report), paired, report["concurrent"]
    )
    print()
    print(_e2e_report.table(summary, args.tasks))
    if paired:
        print(f"\npaired in one process: {_e2e_report.paired_brief(paired)}")
    for v, res in paired_routed.items():
        print(f"paired in one process, {v}: {_e2e_report.paired_brief(res)}")
    if report["concurrent"]:
        print(f"concurrent on two GPUs: {_e2e_report.concurrent_brief(report['concurrent'])}")
    for v, why in skipped.items():
        print(f"skipped {v}: {why}")
    print(f"\nwrote {json_path}" + (f" and {png}" if png else " (no PNG: matplotlib is not installed)"))
    print(f"total {report['wall_s']} s")
    return 0


def _sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _record(raw: list, res: dict, round_index: int, prefix: str, reference: dict) -> None:
    res["round"] = round_index
    _e2e_report.compare_logits(res, reference)
    raw.append(res)
    brief = ", ".join(
        f"{t} {x['tokens_per_s']:.1f} tok/s" if "tokens_per_s" in x else f"{t} error" for t, x in res["tasks"].items()
    )
    print(prefix, brief or res.get("error", "no result")[:200], f"[{res.get('wall_s', '?')} s]", flush=True)


def replot(json_path: str) -> int:
    """Draws the PNG of a written report again (e.g. after the chart changed)."""
    report = json.loads(Path(json_path).read_text())
    tasks = list(report["sizes"])
    png = _e2e_report.chart(
        report["summary"],
        tasks,
        Path(json_path).with_suffix(".png"),
        _e2e_report.title(report),
        report.get("paired"),
        report.get("concurrent"),
    )
    print(f"wrote {png}" if png else "no PNG: matplotlib is not installed", file=sys.stderr if not png else sys.stdout)
    return 0 if png else 1


if __name__ == "__main__":
    sys.exit(main())
