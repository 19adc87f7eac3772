"""`python -m torch_fl demo --graphs`: Qwen3 greedy decoding with CUDA graphs, on flagos and on native cuda.

Each side decodes with transformers' static KV cache, one decode step captured into a CUDA graph
(torch.flagos.CUDAGraph on flagos, torch.cuda.CUDAGraph on native) and replayed per token
(torch_fl/models/graph_decode.py). Prints tokens/s of graph decoding on both and of native eager
generate(), whether the tokens agree, and what the flagos graph captured from the routes.
Needs a CUDA backing: host memory has no CUDA graphs.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time

import torch

import torch_fl


def needs_cuda_message() -> str:
    return (
        "demo --graphs needs a CUDA backing: it captures decode steps into CUDA graphs, and flagos is backed by "
        "host memory in this process (no usable GPU, or FLAGOS_ACCELERATOR=cpu). Run it on a GPU, or run "
        "`python -m torch_fl demo` without --graphs."
    )


def _timed(fn, device) -> tuple[torch.Tensor, float]:
    from torch_fl.models import workloads

    workloads.synchronize(device)
    start = time.perf_counter()
    out = fn()
    workloads.synchronize(device)
    return out.cpu(), time.perf_counter() - start


def run(args, spec: str, dtype: torch.dtype, new_tokens: int, prompt_len: int, index: int) -> int:
    from torch_fl import routing
    from torch_fl.models import graph_decode, qwen3, workloads

    if torch_fl.backing() != "cuda":
        print(needs_cuda_message(), file=sys.stderr)
        return 2
    device, native = torch.device("flagos", index), torch.device("cuda", index)
    print(f"torch_fl {torch_fl.__version__} demo --graphs  (torch {torch.__version__})")
    print(f"  device : {device} backed by {native} ({torch.flagos.get_device_name(index)})")
    base = qwen3.build(spec, seed=args.seed, dtype=dtype)
    print(f"  model  : {qwen3.describe(base)}, {str(dtype).removeprefix('torch.')}")
    ids = qwen3.tokens(base.config.vocab_size, 1, prompt_len, seed=args.seed + 1)
    max_len = prompt_len + new_tokens
    models = {"flagos": copy.deepcopy(base).to(device), "native": base.to(native)}
    devices = {"flagos": device, "native": native}
    dec = {s: graph_decode.GraphDecoder(models[s], 1, max_len, devices[s]) for s in models}
    eager = {s: graph_decode.GraphDecoder(models[s], 1, max_len, devices[s], graphs=False) for s in models}

    print(f"  capturing one decode step per side ({prompt_len}-token prompt, {new_tokens} new tokens)")
    routing.reset_stats()
    dec["flagos"].decode(ids.to(device), new_tokens)  # captures, then decodes
    dec["native"].decode(ids.to(native), new_tokens)
    for s in models:  # warm-up of the eager paths
        eager[s].decode(ids.to(devices[s]), new_tokens)
        workloads.greedy(models[s], ids.to(devices[s]), new_tokens)

    rates: dict[str, list[float]] = {"flagos graph": [], "native graph": [], "native eager generate()": []}
    outs: dict[str, torch.Tensor] = {}
    for r in range(args.rounds):
        order = ["flagos", "native"] if r % 2 == 0 else ["native", "flagos"]
        for s in order:
            outs[s], sec = _timed(lambda s=s: dec[s].decode(ids.to(devices[s]), new_tokens), devices[s])
            rates[f"{s} graph"].append(new_tokens / sec)
        _, sec = _timed(lambda: workloads.greedy(models["native"], ids.to(native), new_tokens), native)
        rates["native eager generate()"].append(new_tokens / sec)
    eager_out = {s: eager[s].decode(ids.to(devices[s]), new_tokens).cpu() for s in models}

    med = {k: statistics.median(v) for k, v in rates.items()}
    print("\nResult (tokens/s, medians of", args.rounds, "alternating rounds)")
    for k, v in med.items():
        print(f"  {k:<26} {v:10.1f}")
    print(f"  flagos graph / native graph      {med['flagos graph'] / med['native graph']:.3f}x")
    print(f"  flagos graph / native eager      {med['flagos graph'] / med['native eager generate()']:.2f}x")
    same_native = torch.equal(outs["flagos"], outs["native"])
    same_eager = all(torch.equal(outs[s], eager_out[s]) for s in models)
    print(f"  greedy tokens, flagos graph = native graph: {'yes' if same_native else 'NO'}")
    print(f"  greedy tokens, graph = the same steps run eagerly (each side): {'yes' if same_eager else 'NO'}")

    graph = dec["flagos"].graph
    captured = graph.captured_calls()
    per_backend: dict[str, int] = {}
    for (_, backend), n in captured.items():
        per_backend[backend] = per_backend.get(backend, 0) + n
    print(
        f"\n  the flagos graph captured {sum(captured.values())} routed calls of {len({op for op, _ in captured})} "
        f"operators ({', '.join(f'{b} {n}' for b, n in sorted(per_backend.items()))}); counted once, at capture, "
        f"in routing.stats(): its {graph.replays} replays ran them without routing"
    )
    other = sorted({op for op, b in captured if b != "native"})
    if other:
        print(f"  captured on other backends than native: {', '.join(other)}")
    return 0 if same_eager else 1
