"""`python -m torch_fl calibrate`: measured routing for a workload on this machine.

Runs a workload on flagos (the demo's Qwen3, a local Hugging Face checkpoint,
or your script), records its calls, times each on native and on FlagGems,
checks FlagGems' results against native's, and writes a routing file
(torch_fl/calibration/). Use the file with FLAGOS_BACKEND_CONFIG=FILE.
"""

from __future__ import annotations

import argparse
import os
import runpy
import shlex
import sys

import torch

import torch_fl
from torch_fl.calibration import confirm, isolate, measure
from torch_fl.routing.policy import device_fault

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

#: timer(run, call, backend) -> seconds per call; None: measure.SyncTimer (tests put a fake one here)
TIMER: measure.Timer | None = None
#: workload_timer(fn) -> seconds per run of the workload; None: confirm.synchronized_timer (tests: a fake one)
WORKLOAD_TIMER: confirm.WorkloadTimer | None = None


def add_arguments(parser) -> None:
    src = parser.add_mutually_exclusive_group()
    src.add_argument(
        "--model",
        default=None,
        help="demo (the demo's model: Qwen3-0.6B architecture on a GPU, tiny on host memory), tiny, 0.6b, a local "
        "Hugging Face checkpoint directory, or a standard model built from its configuration: gpt2 (GPT-2 small), "
        "bert (BERT-base), vit (ViT-B/16), each also as NAME-tiny (default: demo)",
    )
    src.add_argument(
        "--script",
        metavar="PATH",
        help="run this Python script (as __main__) and calibrate the flagos calls it makes; its arguments follow --",
    )
    parser.add_argument("script_args", nargs="*", help="arguments for --script (after --)")
    parser.add_argument("-o", "--output", default="calibrated.conf", help="routing file to write (calibrated.conf)")
    parser.add_argument("--candidate", default="flaggems", help="backend to measure against native (flaggems)")
    parser.add_argument("--dtype", default="auto", choices=["auto", *DTYPES], help="model dtype (bfloat16 on a GPU)")
    parser.add_argument(
        "--tasks",
        default=None,
        help="what the model workload runs, a comma list of decode (greedy generation of --tokens), prefill (one "
        "forward of --batch x --seq tokens, or --batch images) and train (one AdamW step, bf16 autocast over "
        "float32 weights; Qwen3 on half the batch); default every task the model has (BERT and ViT do not "
        "decode), the e2e benchmark's tasks",
    )
    parser.add_argument("--tokens", type=int, default=None, help="tokens to generate (default 16 on a GPU, 4 else)")
    parser.add_argument("--prompt-len", type=int, default=None, help="prompt length (default 32 on a GPU, 8 else)")
    parser.add_argument(
        "--batch",
        type=int,
        default=None,
        help="prefill batch (Qwen3: 8 on a GPU, 2 else; gpt2 8, bert 32, vit 64 images; NAME-tiny 2)",
    )
    parser.add_argument(
        "--seq",
        type=int,
        default=None,
        help="prefill/train length (Qwen3: 512 on a GPU, 16 else; gpt2 1024, bert 128; NAME-tiny 16)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds, native and candidate alternating (5)")
    parser.add_argument("--reps", type=int, default=10, help="calls per timing sample (10)")
    parser.add_argument(
        "--min-speedup",
        type=float,
        default=1.05,
        help="the candidate must be this many times faster than native to take a class (1.05)",
    )
    parser.add_argument(
        "--confirm",
        type=int,
        default=3,
        metavar="PAIRS",
        help="pairs of workload runs, routed against all native, that must confirm the candidate's classes "
        "before they are written (3; 0: write them unconfirmed)",
    )
    parser.add_argument("--per-op", type=int, default=32, help="signatures measured per operator, at most (32)")
    parser.add_argument(
        "--include",
        default="default",
        help="the file the rules refine: default (this backing's shipped file), none, builtin:NAME or a path",
    )
    parser.add_argument(
        "--isolate",
        default="auto",
        choices=["auto", "on", "off"],
        help="calibrate in a worker process and start a new one without the operator whose kernel ended it (a "
        "GPU fault): auto (default) is on where flagos is backed by CUDA",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.add_argument("--worker-state", help=argparse.SUPPRESS)  # isolate.py: this process is the worker


TASKS = ("decode", "prefill", "train")


def parse_tasks(text: str | None, model: str = "demo") -> list[str]:
    """--tasks for --model: a comma list of the model's tasks (None: all of them)."""
    from torch_fl.models import standard

    std = standard.parse(model)
    own = TASKS if std is None or standard.STANDARD[std[0]].causal else ("prefill", "train")
    if text is None:
        return list(own)
    tasks = [t.strip() for t in text.split(",") if t.strip()]
    if not tasks or set(tasks) - set(TASKS):
        raise ValueError(f"--tasks {text!r}: expected a comma list of {', '.join(TASKS)}")
    if set(tasks) - set(own):
        raise ValueError(f"--tasks {text!r}: {model} generates no text; its tasks are {', '.join(own)}")
    return tasks


def check_arguments(args) -> None:
    """What can be wrong with the arguments, found before any work starts (or any worker process: isolate.py)."""
    from torch_fl.calibration import check_candidate

    if args.script_args and not args.script:
        raise ValueError(f"unexpected arguments {args.script_args}: only --script takes arguments (after --)")
    if args.script and not os.path.isfile(args.script):
        raise ValueError(f"--script {args.script}: no such file")
    if not args.script:
        parse_tasks(args.tasks, args.model or "demo")
    if args.confirm < 0:
        raise ValueError(f"--confirm {args.confirm}: the number of pairs is 0 (no confirmation) or more")
    check_candidate(args.candidate)


def model_workload(args):
    """The model's tasks (--tasks: what e2e.py measures) as one workload: (fn, description)."""
    from torch_fl.models import qwen3, standard, workloads

    spec = args.model or "demo"
    tasks = parse_tasks(args.tasks, spec)
    on_gpu = torch_fl.backing() == "cuda"
    if standard.parse(spec) is not None:
        return standard_workload(args, *standard.parse(spec), tasks, on_gpu)
    spec = ("0.6b" if on_gpu else "tiny") if spec == "demo" else qwen3.canonical(spec)
    dtype = DTYPES[args.dtype] if args.dtype != "auto" else (torch.bfloat16 if on_gpu else torch.float32)
    tokens = args.tokens or (16 if on_gpu else 4)
    prompt_len = args.prompt_len or (32 if on_gpu else 8)
    batch, seq = args.batch or (8 if on_gpu else 2), args.seq or (512 if on_gpu else 16)
    model = qwen3.build(spec, dtype=dtype).to("flagos") if {"decode", "prefill"} & set(tasks) else None
    runs, parts = [], []
    if "decode" in tasks:
        ids = qwen3.tokens(model.config.vocab_size, 1, prompt_len).to("flagos")
        runs.append(lambda: workloads.greedy(model, ids, tokens))
        parts.append(f"decode ({prompt_len}-token prompt, {tokens} new tokens)")
    if "prefill" in tasks:
        batch_ids = qwen3.tokens(model.config.vocab_size, batch, seq, seed=2).to("flagos")

        def prefill():
            with torch.no_grad():
                return model(input_ids=batch_ids, use_cache=False, logits_to_keep=1).logits

        runs.append(prefill)
        parts.append(f"prefill ({batch} x {seq})")
    if "train" in tasks:
        trained = qwen3.build(spec, dtype=torch.float32).to("flagos").train()
        opt = torch.optim.AdamW(trained.parameters(), lr=1e-5)
        train_ids = qwen3.tokens(trained.config.vocab_size, max(1, batch // 2), seq, seed=3).to("flagos")
        runs.append(lambda: workloads.train_step(trained, opt, train_ids))
        parts.append(f"train ({max(1, batch // 2)} x {seq}, bf16 autocast)")

    def run():
        for fn in runs:
            fn()

    return run, f"Qwen3 '{spec}' ({str(dtype).removeprefix('torch.')}): " + ", ".join(parts)


def standard_workload(args, name: str, tiny: bool, tasks: list[str], on_gpu: bool):
    """A standard model's tasks (torch_fl/models/standard.py), at the batch sizes people train with."""
    from torch_fl.models import standard, workloads

    spec = standard.STANDARD[name]
    dtype = DTYPES[args.dtype] if args.dtype != "auto" else (torch.bfloat16 if on_gpu else torch.float32)
    batch = args.batch or (standard.TINY_BATCH if tiny else spec.batch)
    seq = None if spec.seq is None else args.seq or (standard.TINY_SEQ if tiny else spec.seq)
    shape = f"{batch} x {seq}" if seq is not None else f"{batch} images"
    model = standard.build(name, tiny, dtype=dtype).to("flagos") if {"decode", "prefill"} & set(tasks) else None
    runs, parts = [], []
    if "decode" in tasks:
        tokens, prompt_len = args.tokens or (16 if on_gpu else 4), args.prompt_len or (32 if on_gpu else 8)
        ids = standard.batch(model, 1, prompt_len)["input_ids"].to("flagos")
        runs.append(lambda: workloads.greedy(model, ids, tokens))
        parts.append(f"decode ({prompt_len}-token prompt, {tokens} new tokens)")
    if "prefill" in tasks:
        inputs = standard.to(standard.batch(model, batch, seq, seed=2), "flagos", dtype)
        runs.append(lambda: standard.forward(model, inputs))
        parts.append(f"prefill ({shape})")
    if "train" in tasks:
        trained = standard.build(name, tiny).to("flagos").train()
        opt = torch.optim.AdamW(trained.parameters(), lr=1e-5)
        train_inputs = standard.to(standard.batch(trained, batch, seq, seed=3), "flagos")
        runs.append(lambda: standard.train_step(trained, opt, train_inputs))
        parts.append(f"train ({shape}, bf16 autocast)")

    def run():
        for fn in runs:
            fn()

    title = spec.title + (" (tiny)" if tiny else "")
    return run, f"{title} ({str(dtype).removeprefix('torch.')}): " + ", ".join(parts)


def script_workload(path: str, argv: list[str]):
    def run():
        saved = sys.argv
        sys.argv = [path, *argv]
        try:
            runpy.run_path(path, run_name="__main__")
        finally:
            sys.argv = saved

    return run, f"script {path}"


def run(args) -> int:
    from torch_fl.calibration import calibrate
    from torch_fl.vocab.errors import RoutingError

    try:
        check_arguments(args)
    except (ValueError, RoutingError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))
    command, excluded, journal = "python -m torch_fl " + shlex.join(args.argv), None, None
    if args.worker_state:
        command, excluded = isolate.read_state(args.worker_state)
        journal = isolate.Journal(args.worker_state)
    elif args.isolate == "on" or (args.isolate == "auto" and torch_fl.backing() == "cuda"):
        say(f"[calibrate] calibrating in a worker process (--isolate {args.isolate})")
        # The worker's option goes before the command's own arguments: --script's follow a "--".
        argv = args.argv

        def worker(state: str) -> list[str]:
            return [sys.executable, "-m", "torch_fl", argv[0], "--worker-state", state, *argv[1:]]

        return isolate.supervise(worker, args.candidate, command, lambda m: print(m, file=sys.stderr, flush=True))
    try:
        fn, desc = script_workload(args.script, args.script_args) if args.script else model_workload(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"error: the model workload needs transformers ({e}): pip install -e .[models]", file=sys.stderr)
        return 2
    if excluded:
        say(f"[calibrate] on native only: {', '.join(excluded)}")
    say(f"[calibrate] workload: {desc}; candidate: {args.candidate}")
    try:
        result = calibrate(
            fn,
            args.output,
            candidate=args.candidate,
            timer=TIMER,
            rounds=args.rounds,
            reps=args.reps,
            min_speedup=args.min_speedup,
            per_op=args.per_op,
            include=None if args.include == "none" else args.include,
            progress=not args.quiet,
            command=command,
            excluded=excluded,
            journal=journal,
            confirm_pairs=args.confirm,
            workload_timer=WORKLOAD_TIMER,
        )
    except (RoutingError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        if journal is None or not device_fault(e):
            raise
        print(f"[calibrate] worker: {isolate.exception_line(e)}", file=sys.stderr)  # the supervisor goes on
        return 3
    print(result.summary())
    if result.unavailable:
        print(
            f"wrote {result.path} WITHOUT RULES: {args.candidate} is unavailable here ({result.unavailable}). "
            "Run calibrate where it is available (FlagGems needs a GPU and flag_gems installed).",
            file=sys.stderr,
        )
        return 1
    print(f"wrote {result.path}: use it with FLAGOS_BACKEND_CONFIG={result.path}")
    return 0
