"""How often a routed call's borrow misses the alias pool, in a model's steady state.

Counts, with the core's alias pool counters, the borrows of a routed call's flagos arguments and the misses (a
new alias made, or another reshaped) of a forward and a greedy decode of the Qwen3-0.6B architecture (fewer
layers, a small vocabulary), after a warm-up and after another batch shape, and of a training step (forward,
backward, gradient clipping, AdamW over every parameter in lists). Counts, not timings.

    python -m benchmarks.alias_pool [--layers 4] [--batch 8] [--length 512] [--out PATH]
"""

from __future__ import annotations

import sys

import torch

import torch_fl
from benchmarks import common
from torch_fl.models import qwen3, workloads


def pool_counts() -> dict:
    borrows, made, reshaped = torch_fl._C._alias_pool_stats()
    return {"borrows": borrows, "made": made, "reshaped": reshaped}


def measure(run, warmups: int) -> dict:
    for _ in range(warmups):
        run()
    before = pool_counts()
    run()
    d = {k: v - before[k] for k, v in pool_counts().items()}
    d["missed"] = round((d["made"] + d["reshaped"]) / max(d["borrows"], 1), 4)
    return d


def main(argv=None) -> int:
    p = common.parser(__doc__, "alias-pool")
    p.add_argument("--layers", type=int, default=4, help="decoder layers of the 0.6B architecture (default 4)")
    p.add_argument("--batch", type=int, default=8, help="prefill batch (default 8, as e2e.py)")
    p.add_argument("--length", type=int, default=512, help="prefill length (default 512, as e2e.py)")
    p.add_argument("--decode-tokens", type=int, default=64, help="tokens of the decode (default 64)")
    args = p.parse_args(argv)

    dtype = torch.bfloat16 if torch_fl.backing() == "cuda" else torch.float32
    small = dict(num_hidden_layers=args.layers, vocab_size=1024, bos_token_id=None, eos_token_id=None)
    model = qwen3.build("0.6b", dtype=dtype, **small).to("flagos")
    ids = qwen3.tokens(1024, args.batch, args.length).to("flagos")
    other = qwen3.tokens(1024, args.batch // 2 or 1, args.length // 2 + 3).to("flagos")
    prompt = qwen3.tokens(1024, 1, 32).to("flagos")

    def prefill(x=ids):
        with torch.no_grad():
            model(input_ids=x, use_cache=False)

    rows = {}
    rows["prefill"] = measure(prefill, warmups=2)
    prefill(other)  # another shape fills the pool, then the first again
    rows["prefill after another shape"] = measure(prefill, warmups=1)
    rows["decode"] = measure(lambda: workloads.greedy(model, prompt, args.decode_tokens), warmups=1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = ids[:2, :64]

    def train_step():
        model(input_ids=batch, labels=batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()

    rows["training step"] = measure(train_step, warmups=2)
    report = {"backing": torch_fl.backing(), "args": {k: v for k, v in vars(args).items() if k != "out"}}
    print(f"wrote {common.write('alias-pool', {**report, 'rows': rows}, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
