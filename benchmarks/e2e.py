"""End-to-end benchmark: Qwen3 decode, prefill and training on flagos vs native PyTorch.

    python -m benchmarks.e2e                          # GPU: Qwen3-0.6B architecture, all variants
    python -m benchmarks.e2e --model tiny --quick     # host smoke run (written to the temporary folder)
    python -m benchmarks.e2e --variants native,flagos --paired 6 --step-pairs 4   # + in-process pairs
    python -m benchmarks.e2e --replot benchmarks/results/e2e-h200.json   # the chart again

Tasks (full sizes): decode (batch 1, 32-token prompt, 64 new tokens, greedy), prefill (8 x 512 tokens, one
forward pass, logits of the last position as generate() computes them), train (4 x 512, AdamW, bf16 autocast,
fp32 weights), graphs (decode's sizes with CUDA graphs, torch_fl/models/graph_decode.py; needs a GPU; its
ratio_to_native is to native graph decode, ratio_to_native_eager_decode to native's decode task).
Decode and prefill run the model in bf16 on a GPU (fp32 on host memory).

Variants: native (PyTorch on the backing device; never imports torch_fl), flagos (default routes),
flagos_flaggems (FLAGOS_USE_FLAGGEMS=1), flagos_calibrated (routed by --calibrated FILE, a file written by
`python -m torch_fl calibrate`), cuda_flaggems (native cuda under flag_gems.enable()).

The parent never touches a device. Every (round, variant) runs in its own child process (`--worker
VARIANT`) that prints one JSON line, so variants that cannot share a process (native CUDA autograd after
torch_fl is imported, PyTorch issue 161129; flag_gems.enable()) are measured alike. Rounds rotate the order
of the variants. Errors are recorded as results. Built-in models get random weights from --seed, saved once
to a temporary checkpoint that every child loads. Each decode child saves its prompt's last-position logits;
the parent compares them with native's under the tests' tolerance for the dtype: tokens that leave native's
are explained when operators ran on other kernels than native and the logits agree, else a defect.

On a shared machine whose load drifts between processes, pairs are the steadier numbers: --paired N runs
decode, prefill (and graphs) on native and flagos in one process, alternating call by call; training
cannot share a process with native, so a native and a flagos training worker take turns (N ABBA samples).
--paired-variants pairs each flagos routing listed the same way, and its training step in one process
against flagos's native routes. --step-pairs N alternates two models token by token in one thread, and
also decodes each sequence with each model alone, showing whether alternating slowed the steps.

Writes benchmarks/results/e2e-<machine>.json (--out redirects it) and the .png beside it (with matplotlib).
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


def _run_child(variant, args, ckpt, sizes, routes: str | None = None) -> dict:
    """One child process for `variant` (routed as the variant `routes` says, default `variant`); its result."""
    cmd = common.child_cmd("e2e", "--worker", variant, "--ckpt", ckpt, "--tasks", ",".join(args.tasks))
    cmd += ["--sizes", json.dumps(sizes), "--dtype", args.dtype, "--seed", str(args.seed)]
    cmd += ["--paired", str(args.paired), "--step-pairs", str(args.step_pairs)]
    cmd += ["--logits-dir", args.logits_dir] if args.logits_dir else []
    env = _variant_env(routes or variant, args.calibrated)
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
    p.add_argument("--tasks", help="comma list of decode,prefill,train,graphs (default: all; graphs needs CUDA)")
    p.add_argument("--variants", help=f"comma list of {','.join(VARIANTS)} (default: all available)")
    p.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    p.add_argument("--dtype", default="auto", help="weights for decode/prefill: auto (bf16 on GPU) | float32 | ...")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="JSON path, or a folder for e2e-<machine>.json (default benchmarks/results/)")
    p.add_argument("--deadline", type=float, help="start no child that would end after this many seconds")
    p.add_argument("--child-timeout", type=int, default=300, help="seconds per child process")
    p.add_argument("--paired", type=int, default=0, help="native/flagos pairs in one process, before the rounds")
    p.add_argument("--paired-variants", default="flagos", help=f"paired with native: comma list of {PAIRABLE}")
    p.add_argument("--step-pairs", type=int, default=0, metavar="N", help="N sequences paired token by token")
    p.add_argument("--calibrated", metavar="FILE", help="also run flagos_calibrated: flagos routed by this file")
    p.add_argument("--replot", metavar="JSON", help="only draw the PNG of this report again, beside it")
    for hidden in ("--worker", "--ckpt", "--sizes", "--logits-dir"):
        p.add_argument(hidden, help=argparse.SUPPRESS)
    p.add_argument("--serve-train", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _parse(argv)
    if args.replot:
        return _e2e_report.replot(args.replot)
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
    png = _e2e_report.chart(summary, args.tasks, json_path.with_suffix(".png"), _e2e_report.title(report), paired)
    print()
    print(_e2e_report.table(summary, args.tasks))
    if paired:
        print(f"\npaired in one process: {_e2e_report.paired_brief(paired)}")
    for v, res in paired_routed.items():
        print(f"paired in one process, {v}: {_e2e_report.paired_brief(res)}")
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


if __name__ == "__main__":
    sys.exit(main())
