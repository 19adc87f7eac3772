"""torch.compile on flagos against torch.compile on native: Qwen3 prefill and training step, small Hugging Face
models' inference, compile times.

    python -m benchmarks.compile_bench                 # GPU: Qwen3-0.6B bf16, prefill 8 x 512, train 4 x 512
    python -m benchmarks.compile_bench --quick         # host smoke: tiny Qwen3, 1 layer, small sizes (to /tmp)
    python -m benchmarks.compile_bench --tasks small   # only the small models (a partial result: not canonical)

Prefill: both variants compiled in one process, each through an entry function of its own (dynamo keeps graphs per
code object: on a shared one a call could run the other variant's guards first), timed in ABBA pairs of --calls
calls. Small models (BERT, GPT-2, Llama, Mistral, Qwen2-MoE, Gemma from configurations of 4 layers, hidden 256;
inference on 1 x 32 tokens, where a compiled call costs more host time than GPU time: wrapper, guards, allocations):
likewise, in one process, pairs of 10 x --calls calls. Training step: a worker process per variant (native CUDA
backward cannot share a process with torch_fl, PyTorch issue 161129), taking turns in ABBA pairs of --steps steps.
Ratio: native time / flagos time per pair. Compile time: the first call minus a steady call, from an empty inductor
cache.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import types

from benchmarks import common


def _sizes(args) -> dict:
    if args.quick:
        return {"variant": "tiny", "layers": 1, "prefill": [2, 16], "train": [2, 16], "dtype": "float32"}
    return {"variant": "0.6b", "layers": None, "prefill": [8, 512], "train": [4, 512], "dtype": "bfloat16"}


def _model(sizes: dict, device: str):
    import torch

    common.models()
    import qwen3

    overrides = {} if sizes["layers"] is None else {"num_hidden_layers": sizes["layers"]}
    model = qwen3.build(sizes["variant"], seed=0, dtype=getattr(torch, sizes["dtype"]), **overrides)
    return model.to(device), qwen3


def _sync(device) -> None:
    import workloads  # importable once _model() ran

    workloads.synchronize(device)


#: the small models (transformers model types) and what their configurations take beside the common sizes
SMALL = {
    "bert": lambda h: {},
    "gpt2": lambda h: {"bos_token_id": 0, "eos_token_id": 0},
    "llama": lambda h: {"num_key_value_heads": 2},
    "mistral": lambda h: {"num_key_value_heads": 2},
    "qwen2_moe": lambda h: {"num_key_value_heads": 2, "num_experts": 4, "num_experts_per_tok": 2,
                            "moe_intermediate_size": h, "shared_expert_intermediate_size": h},
    "gemma": lambda h: {"num_key_value_heads": 2, "head_dim": h // 4},
}  # fmt: skip


def _small_model(kind: str, device: str, quick: bool):
    import torch
    from transformers import AutoConfig, AutoModel

    hidden, layers = (64, 1) if quick else (256, 4)
    cfg = AutoConfig.for_model(
        kind, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4, intermediate_size=4 * hidden,
        vocab_size=1024, **SMALL[kind](hidden),
    )  # fmt: skip
    torch.manual_seed(0)
    return AutoModel.from_config(cfg).eval().to(device)


def _entry_of_its_own(model, variant: str):
    """`model(**inputs)` as a function with a code object of its own. Dynamo keeps compiled graphs per code object:
    the two variants of one model class share its forward (and transformers' wrappers of it), so a call could first
    run the guards of the other variant's graph, fail them, then its own. That cost depends on the order the variants
    compiled and ran in, not on either device, and is not what a process compiling one model pays."""

    def call(**inputs):
        return model(**inputs)

    code = call.__code__.replace(co_name=f"call_{variant}")
    return types.FunctionType(code, call.__globals__, code.co_name, None, call.__closure__)


def _compiled_pairs(build, args, calls: int) -> dict:
    """Both variants in this process: `build(device)` -> (model, its inputs), compiled, then timed in alternation."""
    import torch

    import torch_fl

    common.models()  # _sync's helpers
    devices = {"native": "cuda" if torch_fl.backing() == "cuda" else "cpu", "flagos": "flagos"}
    # Models share transformers' wrapper code: past dynamo's recompile limit (8) a later model would run eagerly.
    # fullgraph: one graph per model, or an error (a graph break or that limit) instead of timing eager code.
    torch._dynamo.reset()
    runs, compile_s = {}, {}
    for variant, device in devices.items():
        model, inputs = build(device)
        compiled = torch.compile(_entry_of_its_own(model, variant), fullgraph=True)

        def run(compiled=compiled, inputs=inputs):
            with torch.no_grad():
                compiled(**inputs)

        first, steady = common.timed_calls(run, lambda d=device: _sync(d), 2)[0]  # the first compiles
        compile_s[variant] = round(first - steady, 3)
        for _ in range(args.warmup):
            run()
        runs[variant] = run

    def sample(run):
        return lambda: [run() for _ in range(calls)]

    secs = common.paired_seconds({k: sample(run) for k, run in runs.items()}, args.pairs, lambda k: _sync(devices[k]))
    secs = {k: [t / calls for t in ts] for k, ts in secs.items()}
    ratios = [n / f for n, f in zip(secs["native"], secs["flagos"], strict=True)]
    return {
        "compile_s": compile_s,
        "native_ms": [round(s * 1e3, 4) for s in secs["native"]],
        "flagos_ms": [round(s * 1e3, 4) for s in secs["flagos"]],
        **common.ratio_stats(ratios),
    }


def prefill_child(args) -> dict:
    """Qwen3 prefill, both variants in this process."""
    sizes = _sizes(args)

    def build(device):
        model, qwen3 = _model(sizes, device)
        ids = qwen3.tokens(model.config.vocab_size, *sizes["prefill"], seed=1).to(device)
        return model, {"input_ids": ids, "use_cache": False}

    return _compiled_pairs(build, args, args.calls)


def small_pairs(kind: str, args, calls: int) -> dict:
    """One small model's inference, both variants in this process."""
    import torch

    def on(device):
        ids = torch.randint(0, 1024, (1, 8 if args.quick else 32), generator=torch.Generator().manual_seed(1))
        return _small_model(kind, device, args.quick), {"input_ids": ids.to(device)}

    return _compiled_pairs(on, args, calls)


def small_child(args) -> dict:
    kinds = ("bert", "llama") if args.quick else tuple(SMALL)
    return {kind: small_pairs(kind, args, 10 * args.calls) for kind in kinds}


def train_worker(args) -> None:
    """A training worker (--child train): compiles and warms up one variant's step, then serves samples."""
    import torch

    device = common.device(args.variant).type
    sizes = _sizes(args)
    model, qwen3 = _model(sizes, device)
    model.train()
    ids = qwen3.tokens(model.config.vocab_size, *sizes["train"], seed=1).to(device)
    compiled = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step():
        opt.zero_grad(set_to_none=True)
        compiled(input_ids=ids, labels=ids).loss.backward()
        opt.step()

    first, steady = common.timed_calls(step, lambda: _sync(device), 2)[0]  # the first compiles
    for _ in range(args.warmup):
        step()
    common.serve(step, lambda: _sync(device), args.steps, {"compile_s": round(first - steady, 3)})


def train_pairs(args, argv: list[str], tmp: str) -> dict:
    """Both variants' training workers, compiled one after the other, then --train-pairs ABBA pairs."""
    cmds = {
        v: (common.child_cmd("compile_bench", *argv, "--child", "train", "--variant", v),
            dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, f"train-{v}")))
        for v in ("native", "flagos")
    }  # fmt: skip
    res = common.worker_pairs(cmds, args.train_pairs, args.timeout, tmp)
    res["compile_s"] = {v: ready["compile_s"] for v, ready in res.pop("ready").items()}
    return {"steps_per_sample": args.steps, **{k: v for k, v in res.items() if k != "ratios"}}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = common.parser(__doc__, "compile")
    p.add_argument("--quick", action="store_true", help="host smoke sizes (tiny Qwen3); writes to the temp folder")
    p.add_argument("--pairs", type=int, default=16, help="prefill pairs (default 16)")
    p.add_argument("--calls", type=int, default=5, help="prefill calls per timed sample (default 5)")
    p.add_argument("--train-pairs", type=int, default=48, help="training pairs, one sample per variant (default 48)")
    p.add_argument("--steps", type=int, default=5, help="timed training steps per sample (default 5)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls after compiling (default 3)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per child process (default 1800)")
    p.add_argument("--tasks", default="prefill,small,train", help="comma list of prefill,small,train (default all)")
    p.add_argument("--child", choices=("prefill", "small", "train"), help=argparse.SUPPRESS)
    p.add_argument("--variant", choices=("native", "flagos"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.pairs, args.train_pairs, args.steps, args.warmup = min(args.pairs, 4), min(args.train_pairs, 2), 3, 1
    if args.child in ("prefill", "small"):
        common.reply((prefill_child if args.child == "prefill" else small_child)(args))
        return 0
    if args.child == "train":
        train_worker(args)
        return 0

    started, tasks, res = time.perf_counter(), args.tasks.split(","), {}
    with tempfile.TemporaryDirectory(prefix="compile-bench-") as tmp:
        for task in ("prefill", "small"):
            if task in tasks:
                env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, task))
                cmd = common.child_cmd("compile_bench", *argv, "--child", task)
                res[task] = common.run_child(cmd, args.timeout, env, label=f"{task} child")
        if "train" in tasks:
            res["train"] = train_pairs(args, argv, tmp)
    for label, e in [(t, res[t]) for t in ("prefill", "train") if t in res] + list(res.get("small", {}).items()):
        print(f"{label}: flagos {common.format_ratio(e)} native, compile s {e['compile_s']}")
    payload = {
        "sizes": _sizes(args),
        "args": {k: v for k, v in vars(args).items() if k not in ("out", "child", "variant")},
        "wall_s": round(time.perf_counter() - started, 1),
        **res,
    }
    partial = set(tasks) != {"prefill", "small", "train"}  # a partial run is not the canonical result
    print(f"wrote {common.write('compile', payload, args.out, smoke=args.quick or partial)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
