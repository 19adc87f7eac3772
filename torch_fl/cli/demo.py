"""`python -m torch_fl demo`: Qwen3 generating tokens on flagos, next to native PyTorch.

Builds the model (the tiny Qwen3 on host backing, the Qwen3-0.6B architecture
on a GPU, or a local checkpoint with --model PATH), generates greedily on
flagos with the active routes and on the native backing device, and prints
tokens/s for both, whether the tokens agree, and which backend ran each
operator. --graphs decodes with CUDA graphs instead (cli/demo_graphs.py).
"""

from __future__ import annotations

import copy
import os
import statistics
import sys
import time

import torch

import torch_fl

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TEXT_PROMPT = "The quickest way to explain what a compiler does is"


def add_arguments(parser) -> None:
    parser.add_argument(
        "--model",
        default="auto",
        help="tiny, 0.6b (Qwen3-0.6B architecture, random weights) or a local HF checkpoint directory "
        "(default: 0.6b on a GPU backing, tiny on host memory)",
    )
    parser.add_argument("--tokens", type=int, default=None, help="tokens to generate (default 64 on a GPU, 32 else)")
    parser.add_argument("--prompt-len", type=int, default=None, help="prompt length in tokens (default 32 / 16)")
    parser.add_argument("--dtype", default="auto", choices=["auto", *DTYPES], help="default: bfloat16 on a GPU")
    parser.add_argument("--device", default="flagos", help="flagos device, e.g. flagos:1 (default: current)")
    parser.add_argument("--seed", type=int, default=0, help="seed for random weights and the prompt")
    parser.add_argument("--top", type=int, default=12, help="operators to list")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="timed generations on each device, alternating flagos and native (default 3; medians reported)",
    )
    parser.add_argument(
        "--graphs",
        action="store_true",
        help="decode with CUDA graphs (static KV cache, one decode step captured and replayed per token) on flagos "
        "and native cuda; needs a CUDA backing",
    )


class _Progress:
    """A per-token progress bar (tqdm when installed, dots otherwise), usable as a generate() streamer."""

    def __init__(self, total: int, label: str):
        self.total, self.label, self.count, self.started = total, label, 0, False
        try:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=label, unit="tok", leave=False, file=sys.stderr)
        except ImportError:
            self.bar = None
            print(f"    {label}: ", end="", flush=True)

    def put(self, value) -> None:
        if not self.started:  # the first call hands over the prompt
            self.started = True
            return
        self.count += 1
        if self.bar is not None:
            self.bar.update(1)
        elif self.count % max(1, self.total // 16) == 0:
            print(".", end="", flush=True)

    def end(self) -> None:
        if self.bar is not None:
            self.bar.close()
        else:
            print(" done", flush=True)


def _streamer(total: int, label: str):
    try:
        from transformers.generation.streamers import BaseStreamer
    except ImportError:
        return _Progress(total, label)

    class Streamer(_Progress, BaseStreamer):
        pass

    return Streamer(total, label)


def _timed_generate(model, ids, new_tokens: int, device, label: str):
    from torch_fl.models import workloads

    workloads.synchronize(device)
    start = time.perf_counter()
    out = workloads.greedy(model, ids, new_tokens, streamer=_streamer(new_tokens, label))
    workloads.synchronize(device)
    return out.cpu(), new_tokens / (time.perf_counter() - start)


def first_difference(outs: dict[str, list[torch.Tensor]], prompt_len: int) -> int | None:
    """The first generated position (0-based) where a round's tokens leave native's first round's, or None."""
    ref = outs["native"][0][0, prompt_len:]
    for out in outs["flagos"] + outs["native"]:
        differs = (out[0, prompt_len:] != ref).nonzero()
        if len(differs):
            return int(differs[0])
    return None


def agreement(
    first_diff: int | None, logits_close: bool, other_kernels: dict[str, list[str]]
) -> tuple[bool, list[str]]:
    """Whether the run agrees with native, and the lines that say why.

    Logits beyond the tolerance the tests use are a defect, whatever the
    tokens. Identical tokens with close logits agree. Different tokens are
    explained, not a defect, when some operators ran on other kernels than
    native (FlagGems, the CPU fallback), which round differently: greedy
    decoding of near-tied logits turns a last-bit difference into another
    token. With native routes only, flagos runs native's own kernels, so any
    difference is a defect.
    """
    if not logits_close:
        return False, [_DEFECT.format(why="the logits differ beyond the tolerance")]
    if first_diff is None:
        return True, []
    if other_kernels:
        ran = "; ".join(f"{b}: {', '.join(ops)}" for b, ops in other_kernels.items())
        return True, [
            f"  why: operators ran on other kernels than native ({ran}), which round differently;",
            "  greedy decoding turns a last-bit difference between near-tied logits into another token,",
            "  and the logits agree within tolerance",
        ]
    return False, [_DEFECT.format(why="every operator ran native's own kernels, which must give native's tokens")]


_DEFECT = "  this is a defect ({why}): please report it with this output"


def _print_rounds(rates: dict[str, list[float]]) -> None:
    pairs = [f / n for f, n in zip(rates["flagos"], rates["native"], strict=True)]
    print(f"  each round, flagos / native: {'  '.join(f'{p:.2f}x' for p in pairs)}")
    if max(pairs) > 1.05 * min(pairs):
        # On a shared machine one generation's speed swings with the load; a
        # few rounds cannot separate flagos's cost from that.
        print(
            f"  (the rounds differ by {100 * (max(pairs) / min(pairs) - 1):.0f} %: a shared machine's load moves "
            "single rounds; benchmarks/e2e.py --paired 40 measures over many pairs)"
        )


def _print_agreement(first_diff: int | None, fl_logits, nat_logits, dtype: torch.dtype, rows: list) -> bool:
    """Prints whether flagos gave native's tokens, how close the prompt's logits are, and why they differ."""
    from torch_fl.models import workloads
    from torch_fl.routing import summary as route_stats

    if first_diff is None:
        print("  greedy tokens identical to native: yes")
    else:
        print(f"  greedy tokens identical to native: NO (first difference at generated token {first_diff + 1})")
    tol = workloads.LOGITS_TOLERANCE[dtype]
    logits_close = torch.allclose(fl_logits, nat_logits, **tol)
    print(
        f"  prompt's last-position logits: max |flagos - native| {(fl_logits - nat_logits).abs().max().item():.3g}, "
        f"within the {str(dtype).removeprefix('torch.')} tolerance (rtol {tol['rtol']:g}, atol {tol['atol']:g}): "
        f"{'yes' if logits_close else 'NO'}"
    )
    agrees, why = agreement(first_diff, logits_close, route_stats.non_native_ops(rows))
    for line in why:
        print(line)
    return agrees


def _step(i: int, n: int, text: str) -> None:
    print(f"[{i}/{n}] {text}", flush=True)


def run(args) -> int:
    if getattr(args, "graphs", False) and torch_fl.backing() != "cuda":
        from torch_fl.cli.demo_graphs import needs_cuda_message

        print(needs_cuda_message(), file=sys.stderr)
        return 2
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("the demo needs transformers: pip install --no-build-isolation -e .[models]", file=sys.stderr)
        return 2
    from torch_fl import routing
    from torch_fl.models import qwen3, workloads
    from torch_fl.routing import summary as route_stats

    backing = torch_fl.backing()
    on_gpu = backing == "cuda"
    device = torch.device(args.device)
    if device.type != "flagos":
        print(f"--device must be a flagos device (flagos or flagos:N), not {args.device!r}", file=sys.stderr)
        return 2
    index = torch.flagos.current_device() if device.index is None else device.index
    if index >= torch.flagos.device_count():
        print(f"flagos:{index} does not exist: {torch.flagos.device_count()} flagos device(s)", file=sys.stderr)
        return 2
    device = torch.device("flagos", index)
    native = torch.device(backing, index) if on_gpu else torch.device("cpu")
    spec = args.model if args.model != "auto" else ("0.6b" if on_gpu else "tiny")
    try:
        spec = qwen3.canonical(spec)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    dtype = DTYPES[args.dtype] if args.dtype != "auto" else (torch.bfloat16 if on_gpu else torch.float32)
    new_tokens = args.tokens or (64 if on_gpu else 32)
    prompt_len = args.prompt_len or (32 if on_gpu else 16)

    if args.rounds < 1:
        print(f"--rounds must be at least 1, not {args.rounds}", file=sys.stderr)
        return 2
    if args.graphs:
        from torch_fl.cli import demo_graphs

        return demo_graphs.run(args, spec, dtype, new_tokens, prompt_len, index)
    print(f"torch_fl {torch_fl.__version__} demo  (torch {torch.__version__}, transformers {transformers.__version__})")
    name = torch.flagos.get_device_name(index)
    print(f"  device : {device}  backed by {native} ({name}); backing = {backing}")
    profile = "FlagGems profile (FLAGOS_USE_FLAGGEMS=1)" if os.environ.get("FLAGOS_USE_FLAGGEMS") else "default routes"
    cfg = routing.config_file()
    print(f"  routes : {profile}" + (f", file {cfg}" if cfg else ""))

    rounds = args.rounds
    steps = 4
    _step(1, steps, f"building Qwen3 '{spec}' (seed {args.seed}, {str(dtype).replace('torch.', '')}) on the CPU")
    t0 = time.perf_counter()
    base = qwen3.build(spec, seed=args.seed, dtype=dtype)
    print(f"      {qwen3.describe(base)}  [{time.perf_counter() - t0:.1f} s]")

    tokenizer, ids = None, None
    if not qwen3.is_builtin(spec):
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(spec, local_files_only=True)
            ids = tokenizer(TEXT_PROMPT, return_tensors="pt").input_ids
        except Exception as e:  # a checkpoint without a tokenizer still runs on token ids
            print(f"      no tokenizer in {spec} ({type(e).__name__}); using random token ids")
    if ids is None:
        ids = qwen3.tokens(base.config.vocab_size, 1, prompt_len, seed=args.seed + 1)
    print(f"      prompt: {ids.shape[1]} tokens, generating {new_tokens} greedily")

    _step(2, steps, f"copying the weights to {device} and to native {native}")
    flagos_model = copy.deepcopy(base).to(device)
    native_model = base.to(native)

    # Warm up with the full generation on each: kernels such as cuDNN attention
    # build a plan per sequence length and cache it process-wide, so whichever
    # side ran first would otherwise pay for both.
    _step(3, steps, f"warm-up ({new_tokens} tokens on each)")
    workloads.greedy(flagos_model, ids.to(device), new_tokens)
    workloads.greedy(native_model, ids.to(native), new_tokens)

    # Rounds alternate flagos and native (ABBA), so that a shared machine's
    # changing load hits both alike; the medians are reported.
    _step(4, steps, f"generating on {device} and on native {native}, alternating, {rounds} rounds each")
    sides = [("flagos", flagos_model, device, str(device)), ("native", native_model, native, f"native {native}")]
    rates: dict[str, list[float]] = {"flagos": [], "native": []}
    outs: dict[str, list[torch.Tensor]] = {"flagos": [], "native": []}
    rows = []
    for r in range(rounds):
        for side, model, dev, label in sides if r % 2 == 0 else sides[::-1]:
            table_run = side == "flagos" and r == 0  # the operator table below: one generation's calls
            if table_run:
                routing.reset_stats()
            out, rate = _timed_generate(model, ids.to(dev), new_tokens, dev, f"{label} ({r + 1}/{rounds})")
            if table_run:
                rows = route_stats.stats()
            rates[side].append(rate)
            outs[side].append(out)
            print(f"      {label}: {rate:.1f} tokens/s", flush=True)

    fl_out = outs["flagos"][0]
    fl_rate, nat_rate = statistics.median(rates["flagos"]), statistics.median(rates["native"])
    generated = fl_out[0, ids.shape[1] :].tolist()
    print()
    print("Result")
    print(
        f"  tokens/s   flagos {fl_rate:10.1f}   native {nat_rate:10.1f}   ratio {fl_rate / nat_rate:.2f}x"
        f"   (medians of {rounds} alternating rounds)"
    )
    _print_rounds(rates)
    agrees = _print_agreement(
        first_difference(outs, ids.shape[1]),
        workloads.last_logits(flagos_model, ids.to(device)),
        workloads.last_logits(native_model, ids.to(native)),
        dtype,
        rows,
    )
    if tokenizer is not None:
        print(f"  text: {TEXT_PROMPT!r} -> {tokenizer.decode(generated)!r}")
    else:
        shown = ", ".join(map(str, generated[:16])) + (", ..." if len(generated) > 16 else "")
        print(f"  generated token ids: [{shown}]  ({len(set(generated))} distinct of {len(generated)})")

    total = sum(r.calls for r in rows)
    per_backend = ", ".join(f"{b} {c}" for b, c in route_stats.backends_used(rows).items())
    print(f"\n  operators on flagos during generation: {len(rows)} ops, {total} calls ({per_backend})")
    print(f"  {'operator':<52} {'backend':<14} {'calls':>8}")
    for r in rows[: args.top]:
        print(f"  {r.op:<52} {r.backend:<14} {r.calls:>8}")
    falls = route_stats.fallbacks(rows)
    if falls:
        print(f"\n  fallbacks ({len(falls)} ops):")
        for r in falls:
            print(f"  {r.op:<52} {r.backend:<14} fallbacks {r.fallbacks}  failures {r.failures}")
    else:
        print("\n  fallbacks: none")
    return 0 if agrees else 1
