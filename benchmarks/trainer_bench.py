"""A Hugging Face `Trainer` fine-tune of Qwen3-0.6B in bf16 on flagos against the same Trainer on native CUDA.

    python -m benchmarks.trainer_bench            # GPU: Qwen3-0.6B (random weights), bf16, batch 8 x 512, 200 steps
    python -m benchmarks.trainer_bench --tiny     # host smoke: tiny Qwen3 in fp32, native CPU against host flagos

Each side runs `trainer.train()` in a worker process of its own (native never imports torch_fl; flagos through
`torch_fl.integrations.enable()`), on the same seeded model and dataset. A TrainerCallback times each step to a
device sync and pauses after each sample of --per-sample steps, so the two runs take turns in ABBA pairs.
Reported: per-step losses and their agreement with native's, peak memory, and native / flagos step time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

from benchmarks import common

FIRST = 20  # the early steps judged on their own: later ones drift further apart in bf16
# per mode (--tiny or not): what a CLI option left out takes
SIZES = {
    False: dict(model="0.6b", bf16=True, batch=8, length=512, steps=200, warmup=10, per_sample=10, pairs=16,
                distinct=64, lr=1e-4, rtol=2e-2),
    True: dict(model="tiny", bf16=False, batch=2, length=32, steps=12, warmup=2, per_sample=2, pairs=4,
               distinct=8, lr=1e-3, rtol=1e-4),
}  # fmt: skip


def worker(args) -> None:
    """One variant's Trainer run (--child): answers ready after --warmup steps, one sample per stdin line, then
    (stdin closed) trains on to --steps and answers its losses and peak memory."""
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    expect = common.device(args.variant).type
    dev = None if expect == "cpu" else getattr(torch, expect)  # host (--tiny): cpu, no sync
    # torch_fl's opt-in transformers adapter (docs/integrations.md), as a user is told to enable it: without
    # it TrainingArguments sends batches to cuda or cpu (its fixed list), and accelerate the model too
    adapters = sys.modules["torch_fl"].integrations.enable() if expect == "flagos" else []
    sync = dev.synchronize if dev else (lambda: None)
    common.models()
    import qwen3

    model = qwen3.build(args.model, seed=args.seed)
    pool = qwen3.tokens(model.config.vocab_size, args.distinct, args.length, seed=args.seed + 1)
    # one epoch of --steps batches, so the sampler shuffles once, before any step, alike in both workers
    rows = [
        {"input_ids": pool[i % args.distinct], "labels": pool[i % args.distinct]}
        for i in range(args.steps * args.batch)
    ]

    class Sampler(TrainerCallback):
        """Times the steps from one `on_step_end` to the next, each to a device sync, and pauses training at
        the end of each sample until the parent asks for the next (or closes stdin: then it steps aside)."""

        def __init__(self):
            self.device, self.live, self.last, self.times = None, True, 0.0, []

        def on_step_end(self, targs, state, control, model=None, **kwargs):
            if self.device is None:  # training has started: Trainer has placed the model
                self.device = str(next(model.parameters()).device)
                assert self.device.split(":")[0] == expect, f"Trainer put the model on {self.device}, not {expect}"
            if not self.live or state.global_step < args.warmup:
                return
            sync()
            now = time.perf_counter()
            if state.global_step > args.warmup:
                self.times.append(now - self.last)
                if len(self.times) < args.per_sample:
                    self.last = now
                    return
            common.reply({"step_s": self.times} if self.times else {"device": self.device})
            self.times = []
            self.live = bool(sys.stdin.readline())
            self.last = time.perf_counter()  # the wait for the other worker's sample is not this step's

    with tempfile.TemporaryDirectory(prefix="trainer-bench-") as out:
        targs = TrainingArguments(
            output_dir=out, bf16=args.bf16, per_device_train_batch_size=args.batch, gradient_accumulation_steps=1,
            max_steps=args.steps, logging_steps=1, report_to=[], save_strategy="no", learning_rate=args.lr,
            seed=args.seed, disable_tqdm=True,
        )  # fmt: skip
        sampler = Sampler()
        trainer = Trainer(model=model, args=targs, train_dataset=rows, callbacks=[sampler])
        if dev:
            dev.reset_peak_memory_stats()
        trainer.train()
        sync()
    common.reply(
        {
            "device": sampler.device,
            "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
            "peak_bytes": dev.max_memory_allocated() if dev else None,
            "optim": getattr(targs.optim, "value", str(targs.optim)),
            "torch_fl_imported": "torch_fl" in sys.modules,
            "args_device": str(targs.device),
            "integrations": adapters,
        }
    )


def agreement(native: list[float], flagos: list[float], rtol: float) -> dict:
    """Per-step |flagos - native| (absolute, and relative to native's loss), within `rtol` over the first
    FIRST steps and over all."""
    diffs = [abs(f - n) for n, f in zip(native, flagos, strict=False)]
    rel = [d / max(abs(n), 1e-12) for d, n in zip(diffs, native, strict=False)]
    full = bool(diffs) and len(native) == len(flagos)
    return {
        "steps": len(diffs),
        "rtol": rtol,
        "max_abs_diff": max(diffs, default=None),
        "mean_abs_diff": statistics.fmean(diffs) if diffs else None,
        "max_rel_diff": max(rel, default=None),
        f"within_first_{FIRST}": bool(diffs) and max(rel[:FIRST]) <= rtol,
        "within_all": full and max(rel) <= rtol,
    }


def run(args, argv: list[str]) -> dict:
    """Both workers taking turns (--pairs samples each), then each trains on to --steps: speed, losses, memory."""
    cmds = {
        v: ([*common.child_cmd("trainer_bench", *argv, "--child"), "--variant", v], None) for v in ("native", "flagos")
    }
    with tempfile.TemporaryDirectory(prefix="trainer-bench-") as tmp:
        try:
            res = common.worker_pairs(cmds, args.pairs, args.timeout, tmp, final=True)
        except RuntimeError as e:
            return dict.fromkeys(("variants", "loss_agreement", "peak_memory", "speed")) | {"errors": {"run": str(e)}}
    n, f = res["final"]["native"], res["final"]["flagos"]
    memory = None
    if n["peak_bytes"] and f["peak_bytes"]:
        memory = {"native_bytes": n["peak_bytes"], "flagos_bytes": f["peak_bytes"]}
        memory["ratio"] = round(f["peak_bytes"] / n["peak_bytes"], 4)
    speed = {"steps_per_sample": args.per_sample} | {k: v for k, v in res.items() if k not in ("ready", "final")}
    for v in ("native", "flagos"):
        speed[f"{v}_steps_per_s"] = round(1e3 / statistics.median(speed[f"{v}_ms"]), 3)
    variants = {
        v: {k: d[k] for k in ("device", "args_device", "integrations", "optim", "peak_bytes", "torch_fl_imported")}
        | {"losses": [round(x, 5) for x in d["losses"]]}
        for v, d in res["final"].items()
    }
    agree = agreement(n["losses"], f["losses"], args.rtol)
    return {"variants": variants, "loss_agreement": agree, "peak_memory": memory, "speed": speed}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = common.parser(__doc__, "trainer")
    p.add_argument("--tiny", action="store_true", help="host smoke: tiny Qwen3 in fp32, few steps (to /tmp)")
    for name in ("pairs", "batch", "length", "steps", "warmup", "per-sample", "distinct", "lr", "rtol"):
        full, tiny = SIZES[False][name.replace("-", "_")], SIZES[True][name.replace("-", "_")]
        p.add_argument(f"--{name}", type=type(full), help=f"default {full}; --tiny: {tiny}")
    p.add_argument("--seed", type=int, default=0, help="model, data and Trainer seed (default 0)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per worker process (default 1800)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--variant", choices=("native", "flagos"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    sizes = SIZES[args.tiny]
    for k, v in sizes.items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
    if args.child:
        worker(args)
        return 0
    if args.warmup < 1 or args.warmup + args.pairs * args.per_sample > args.steps:
        p.error(f"--warmup (>= 1) + --pairs x --per-sample must fit in --steps ({args.steps})")

    started = time.perf_counter()
    res = run(args, argv)
    config = {k: getattr(args, k) for k in (*sizes, "seed")}
    payload = {"config": config, "wall_s": round(time.perf_counter() - started, 1), **res}
    for what, err in res.get("errors", {}).items():
        print(f"{what} failed: {common.exception_line(err)}", file=sys.stderr)
    if res["speed"]:
        print(f"train steps: flagos {common.format_ratio(res['speed'])} native ({args.pairs} pairs)")
    print(f"wrote {common.write('trainer', payload, args.out, smoke=args.tiny)}")
    return 1 if res.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
