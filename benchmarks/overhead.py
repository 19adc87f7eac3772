"""Per-call overhead of the flagos device against native PyTorch, same run.

    python -m benchmarks.overhead                 # full sizes (GPU)
    python -m benchmarks.overhead --quick         # small sizes (smoke; written to the temporary folder)

Small operators: host microseconds per call, in windows shorter than the GPU's launch queue; in context: a
decoder layer's operator mix and the tiny Qwen3's greedy decode, per routed call; large add and bf16 matmul:
GB/s and TFLOP/s. Native and flagos alternate round by round (median of the rounds). With flag_gems on a GPU:
flaggems-routed add/mul against native CUDA, and flaggems_python against flag_gems called directly.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

import torch_fl
from benchmarks import common
from benchmarks.common import abba, alternating
from torch_fl.models.workloads import synchronize as sync


@dataclass
class Row:
    name: str
    unit: str  # "us/call", "GB/s" or "TFLOP/s"
    native: float
    flagos: float
    #: flagos - native of each round (both timed back to back), where kept
    round_diffs: list[float] | None = None
    #: median of per-call differences, where the two were timed call by call in pairs
    paired_added_us: float | None = None

    @property
    def ratio(self) -> float:
        """flagos relative to native: time ratio for us/call, throughput ratio otherwise."""
        return self.flagos / self.native if self.native else float("nan")

    @property
    def added_us(self) -> float | None:
        """flagos - native per call (the median of pair differences where timed in pairs); None for throughput."""
        if self.unit != "us/call":
            return None
        return self.paired_added_us if self.paired_added_us is not None else self.flagos - self.native


# Calls timed between two synchronisations: fewer than the GPU's launch queue holds (about 1024 kernels), so the
# host never waits for the GPU inside a window: the time is what a call costs the host, which is what flagos adds.
WINDOW = 256


def per_call_us(fn: Callable[[], object], device: torch.device, calls: int, window: int = WINDOW) -> float:
    """Host microseconds per call: `calls` calls in windows of `window`, each window timed without its sync."""
    total, done = 0.0, 0
    while done < calls:
        n = min(window, calls - done)
        sync(device)  # start with an empty queue; not timed
        start = time.perf_counter()
        for _ in range(n):
            fn()
        total += time.perf_counter() - start
        done += n
    sync(device)
    return total / calls * 1e6


def paired_calls_us(first: Callable, second: Callable, device: torch.device, pairs: int, clock=time.perf_counter):
    """Host microseconds of each call of `first` and of `second`, timed call by call in ABBA pairs (the median of
    per-pair differences is far steadier than the difference of two medians); the GPU queue drained untimed."""
    times: dict = {first: [], second: []}
    for i in range(pairs):
        if i % (WINDOW // 2) == 0:
            sync(device)
        one, two = abba(i, first, second)
        t0 = clock()
        one()
        t1 = clock()
        two()
        t2 = clock()
        times[one].append((t1 - t0) * 1e6)
        times[two].append((t2 - t1) * 1e6)
    sync(device)
    return times[first], times[second]


def small_ops(device: torch.device) -> dict[str, Callable[[], object]]:
    """The small operators of the issue, on `device` (inputs made once)."""
    g = torch.Generator().manual_seed(0)

    def t(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g, dtype=dtype).to(device)

    a, b = t(4, 4), t(4, 4)
    m1, m2 = t(64, 64), t(64, 64)
    src, idx = t(128, 64), torch.randint(0, 128, (32,), generator=g).to(device)
    parts = [t(16, 16) for _ in range(4)]
    logits = t(32, 128)

    def add_inference():
        # Results made in inference mode are inference tensors (no autograd keys): the
        # route retags those in place as well. The mode's enter and exit cost both sides alike.
        with torch.inference_mode():
            return a + b

    return {
        "add 4x4": lambda: a + b,
        "add 4x4 in inference mode": add_inference,
        "mul 4x4": lambda: a * b,
        "sum.dim 4x4": lambda: a.sum(dim=1),
        "mm 64x64": lambda: m1 @ m2,
        "index_select": lambda: src.index_select(0, idx),
        "cat 4x(16x16)": lambda: torch.cat(parts),
        "softmax 32x128": lambda: torch.softmax(logits, dim=-1),
    }


def layer_sequence(device: torch.device) -> Callable[[], object]:
    """One decoder layer's operators for one token, on tiny tensors (RMSNorm, projections, rotary, attention over
    a 16-token cache, SiLU MLP): the mix a model calls."""
    g = torch.Generator().manual_seed(0)

    def t(*shape):
        return torch.randn(*shape, generator=g).to(device)

    x, norm_w = t(1, 1, 64), t(64)
    wq, wk, wv, wo, w_up, w_gate, w_down = (t(64, 64) for _ in range(7))
    cos, sin = t(1, 1, 64), t(1, 1, 64)
    k_cache, v_cache = t(1, 1, 16, 64), t(1, 1, 16, 64)
    linear = torch.nn.functional.linear

    def rms(h):
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * norm_w

    def rotate(h):
        return h * cos + torch.cat((-h[..., 32:], h[..., :32]), dim=-1) * sin

    def layer():
        h = rms(x)
        q, k, v = rotate(linear(h, wq)), rotate(linear(h, wk)), linear(h, wv)
        keys = torch.cat((k_cache, k.view(1, 1, 1, 64)), dim=2)
        values = torch.cat((v_cache, v.view(1, 1, 1, 64)), dim=2)
        a = torch.nn.functional.scaled_dot_product_attention(q.view(1, 1, 1, 64), keys, values)
        h = x + linear(a.view(1, 1, 64), wo)
        m = rms(h)
        return h + linear(torch.nn.functional.silu(linear(m, w_gate)) * linear(m, w_up), w_down)

    return layer


def routed_calls(fn: Callable[[], object]) -> int:
    """How many operator calls one fn() routes on flagos (views and other metadata operations are not routed)."""
    from torch_fl import routing

    routing.reset_stats()
    fn()
    calls = sum(s.calls for s in routing.stats())
    routing.reset_stats()
    return calls


def context_rows(native: torch.device, flagos: torch.device, rounds: int, calls: int) -> list[Row]:
    """Per routed call: a decoder layer's operator mix, and the tiny Qwen3's greedy decode (needs transformers)."""
    rows = []
    seqs = {native: layer_sequence(native), flagos: layer_sequence(flagos)}
    n = routed_calls(seqs[flagos])
    # Fewer sequences per window than single calls: a window must stay inside the GPU's launch queue.
    per_window = max(1, WINDOW // n)
    for dev in (native, flagos):
        per_call_us(seqs[dev], dev, 20, per_window)
    reps = max(1, calls // n)
    sample = {d: (lambda d=d: per_call_us(seqs[d], d, reps, per_window) / n) for d in seqs}
    rows.append(_row(f"decoder-layer mix ({n} calls), per call", "us/call", rounds, sample, diffs=True))
    try:
        from torch_fl.models import qwen3, workloads
    except ImportError as e:  # transformers is an optional extra
        print(f"  tiny Qwen3 decode row skipped: {e}", flush=True)
        return rows
    tokens = 16
    dtype = torch.bfloat16 if torch_fl.backing() == "cuda" else torch.float32
    model = qwen3.build("tiny", seed=0, dtype=dtype).eval()
    models = {native: copy.deepcopy(model).to(native), flagos: model.to(flagos)}
    prompt = qwen3.tokens(model.config.vocab_size, 1, 32)
    ids = {dev: prompt.to(dev) for dev in models}
    steps = {dev: (lambda d=dev: workloads.greedy(models[d], ids[d], tokens)) for dev in models}
    n = routed_calls(steps[flagos])
    for dev in (native, flagos):
        steps[dev]()
        sync(dev)

    def per_call(dev) -> float:
        sync(dev)
        return common.timed_calls(steps[dev], lambda: sync(dev), 1)[0][0] * 1e6 / n

    name = f"tiny Qwen3 greedy decode ({n // tokens} calls/token), per call"
    rows.append(_row(name, "us/call", rounds, {d: (lambda d=d: per_call(d)) for d in (native, flagos)}, diffs=True))
    return rows


def _row(name: str, unit: str, rounds: int, sample: dict, diffs: bool = False) -> Row:
    """A row from `rounds` rounds alternating the two sides' `sample()` (native's, then flagos's); `diffs`: keep
    each round's difference."""
    native, flagos = alternating(rounds, sample).values()
    kept = [f - n for n, f in zip(native, flagos, strict=True)] if diffs else None
    return Row(name, unit, statistics.median(native), statistics.median(flagos), kept)


def timed_ms(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    """Median milliseconds of fn (device events on a GPU backing, wall clock otherwise)."""
    times = []
    for _ in range(reps):
        sync(device)
        if device.type in ("cuda", "flagos") and torch_fl.backing() == "cuda":
            ev = torch.cuda if device.type == "cuda" else torch.flagos
            start, end = ev.Event(enable_timing=True), ev.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def large_ops(device: torch.device, quick: bool) -> dict[str, tuple[str, float, Callable[[], object]]]:
    """name -> (unit, work per call in GB or TFLOP, fn)."""
    n = (1 << 22) if quick else (1 << 28)  # float32 elements per operand
    mm_n = 512 if quick else 8192
    x = torch.randn(n, device="cpu").to(device)
    y = torch.randn(n, device="cpu").to(device)
    out = torch.empty_like(x)
    p = torch.randn(mm_n, mm_n, dtype=torch.bfloat16).to(device)
    q = torch.randn(mm_n, mm_n, dtype=torch.bfloat16).to(device)
    gb = 3 * n * 4 / 1e9  # two reads and one write
    tflop = 2 * mm_n**3 / 1e12
    return {
        f"add {n >> 20}M fp32 (bandwidth)": ("GB/s", gb, lambda: torch.add(x, y, out=out)),
        f"mm {mm_n}^3 bf16": ("TFLOP/s", tflop, lambda: torch.mm(p, q)),
    }


def run(native: torch.device, flagos: torch.device, rounds: int, calls: int, quick: bool, large=True) -> list[Row]:
    rows: list[Row] = []
    ops = {native: small_ops(native), flagos: small_ops(flagos)}
    for name in ops[native]:
        for dev in (native, flagos):  # warm up (kernel selection, allocator)
            per_call_us(ops[dev][name], dev, 50)
        rows.append(
            _row(name, "us/call", rounds, {d: (lambda d=d, f=ops[d][name]: per_call_us(f, d, calls)) for d in ops})
        )
    if not large:
        return rows
    big = {native: large_ops(native, quick), flagos: large_ops(flagos, quick)}
    for name, (unit, work, _) in big[native].items():
        for dev in (native, flagos):
            timed_ms(big[dev][name][2], dev, 3)
        sample = {d: (lambda d=d, fn=big[d][name][2], w=work: w / (timed_ms(fn, d, 5) / 1e3)) for d in big}
        rows.append(_row(name, unit, rounds, sample))
    return rows


def _pair_row(name: str, first, second, first_dev, second_dev, rounds: int, calls: int) -> Row:
    """`second` against `first`, alternated in rounds and timed call by call in pairs (added_us)."""
    per_call_us(first, first_dev, 50)  # warm up (Triton compile, replay's recording)
    per_call_us(second, second_dev, 50)
    sample = {"a": lambda: per_call_us(first, first_dev, calls), "b": lambda: per_call_us(second, second_dev, calls)}
    row = _row(name, "us/call", rounds, sample, diffs=True)
    one_first, one_second = paired_calls_us(first, second, first_dev, rounds * calls)
    row.paired_added_us = statistics.median(b - a for a, b in zip(one_first, one_second, strict=True))
    return row


def flaggems_rows(rounds: int, calls: int) -> list[Row]:
    """FlagGems-routed 4x4 calls on flagos: `flaggems` (replayed) against native CUDA's kernel, `flaggems_python`
    against that function called directly on CUDA tensors."""
    from torch_fl import backends, routing
    from torch_fl.backends.flaggems import LOADER

    gems = backends.get("flaggems")
    if not gems.available():
        print(f"  flaggems rows skipped: {gems.unavailable_reason()}", flush=True)
        return []
    rows = []
    g = torch.Generator().manual_seed(0)
    a_cpu, b_cpu = torch.randn(4, 4, generator=g), torch.randn(4, 4, generator=g)
    a_n, b_n = a_cpu.to("cuda"), b_cpu.to("cuda")
    # Allocated on flagos, as a model's tensors are (torch_fl.as_flagos() of a CUDA tensor is borrowed as that
    # tensor itself, not a fresh alias per call as a model's calls see).
    a_f, b_f = a_cpu.to("flagos"), b_cpu.to("flagos")
    native = torch.device("cuda", 0)
    flagos = torch.device("flagos", 0)
    for op, call_native, call_direct, call_routed in (
        # The dispatcher hands a Python kernel every argument, defaults included (alpha=1 for add): so does this.
        ("add.Tensor", lambda: a_n + b_n, lambda f: f(a_n, b_n, alpha=1), lambda: a_f + b_f),
        ("mul.Tensor", lambda: a_n * b_n, lambda f: f(a_n, b_n), lambda: a_f * b_f),
    ):
        fn = LOADER.table.get(op)
        if fn is None:
            continue
        short = op.split(".")[0]
        for route, name, first in (
            ("flaggems", f"{short} 4x4 flaggems replay vs native cuda", call_native),
            ("flaggems_python", f"{short} 4x4 flaggems_python routed vs direct", lambda fn=fn, c=call_direct: c(fn)),
        ):
            with routing.route({op: route}):
                rows.append(_pair_row(name, first, call_routed, native, flagos, rounds, calls))
    return rows


def environment() -> dict:
    """What the meta block (benchmarks/common.py) does not say: flagos's version, backing and device."""
    return {"torch_fl": torch_fl.__version__, "backing": torch_fl.backing(), "device": torch.flagos.get_device_name(0)}


def main(argv: list[str] | None = None) -> int:
    parser = common.parser(__doc__, "overhead")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds per variant (median reported)")
    parser.add_argument("--calls", type=int, default=2000, help="calls per round for small operators")
    parser.add_argument("--quick", action="store_true", help="small sizes and few calls (smoke test)")
    parser.add_argument("--small-only", action="store_true", help="only the small-operator (per-call) rows")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.calls = min(args.rounds, 3), min(args.calls, 200)
    backing = torch_fl.backing()
    native = torch.device("cuda", 0) if backing == "cuda" else torch.device("cpu")
    flagos = torch.device("flagos", 0)
    print(f"flagos over {backing}: {environment()['device']}", flush=True)
    rows = run(native, flagos, args.rounds, args.calls, args.quick, large=not args.small_only)
    rows += context_rows(native, flagos, args.rounds, args.calls)
    if not args.small_only:
        rows += flaggems_rows(args.rounds, args.calls)
    report = {
        "environment": environment(),
        "rounds": args.rounds,
        "calls": args.calls,
        "results": [asdict(r) | {"ratio": r.ratio, "added_us": r.added_us} for r in rows],
    }
    out = str(common.write("overhead", report, args.out, smoke=args.quick))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
