"""One DDP training step on flagos against native DDP, at world size 1, alternated in one run.

Each round starts a child process per side, ABBA order: native DDP on cuda (NCCL) or the CPU (gloo), never
importing torch_fl; flagos DDP through the flagos backend. Each times --steps steps of the same seeded MLP; the
ratio is native / flagos median step time per round (above 1: flagos faster), the median over rounds.

    python -m benchmarks.ddp_step                  # the GPU run: writes results/ddp-step-<machine>.json
    python -m benchmarks.ddp_step --smoke          # tiny sizes on any backing, to a temporary file
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import statistics
import sys

from benchmarks import common


def child(side: str, args) -> dict:
    """One side's timing, in this process (world size 1)."""
    import torch.distributed as dist

    common.models()
    device = common.device(side)
    if side == "flagos":
        import torch_fl

        backend, backing = None, torch_fl.backing()  # None: PyTorch picks flagos's default backend
    else:
        backend, backing = ("nccl" if device.type == "cuda" else "gloo"), device.type
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]), RANK="0", WORLD_SIZE="1")
    dist.init_process_group(backend)
    seconds, loss = _train(args, device)
    gc.collect()  # the DDP module held the group: its last reference joins gloo's threads before finalization
    dist.destroy_process_group()
    return {"backing": backing, "step_ms": [s * 1e3 for s in seconds], "loss": loss}


def _train(args, device) -> tuple[list[float], float]:
    """Build the DDP MLP and time its steps; the step times and the final loss."""
    import torch
    import workloads

    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(args.hidden, 16)).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, args.hidden, generator=g).to(device)
    y = torch.randint(0, 16, (args.batch,), generator=g).to(device)

    def step():
        opt.zero_grad(set_to_none=False)
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    workloads.synchronize(device)
    seconds, _ = common.timed_calls(step, lambda: workloads.synchronize(device), args.steps)
    return seconds, torch.nn.functional.cross_entropy(ddp(x), y).item()


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = common.parser(__doc__, "ddp-step")
    p.add_argument("--rounds", type=int, default=8, help="child rounds per side, ABBA order (default 8)")
    p.add_argument("--layers", type=int, default=8, help="hidden layers of the MLP (default 8)")
    p.add_argument("--hidden", type=int, default=2048, help="hidden width (default 2048: 8 x 4M parameters)")
    p.add_argument("--batch", type=int, default=256, help="batch (default 256)")
    p.add_argument("--steps", type=int, default=30, help="timed steps per child (default 30)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, 2 rounds, to a temporary file")
    p.add_argument("--child", choices=["native", "flagos"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.smoke:
        args.rounds, args.layers, args.hidden, args.batch, args.steps, args.warmup = 2, 2, 64, 8, 3, 1
    if args.child:
        common.reply(child(args.child, args))
        return 0

    def run(side: str) -> dict:
        return common.run_child(common.child_cmd("ddp_step", *argv, "--child", side), 600, label=f"the {side} child")

    samples = common.alternating(args.rounds, {side: lambda s=side: run(s) for side in ("native", "flagos")})
    sides = {}
    for side, runs in samples.items():
        medians = [statistics.median(r["step_ms"]) for r in runs]
        sides[side] = {
            "backing": runs[0]["backing"],
            "step_ms_median": round(statistics.median(medians), 4),
            "round_medians_ms": [round(m, 4) for m in medians],
            "loss": runs[0]["loss"],
        }
    n, f = sides["native"], sides["flagos"]
    ratio = common.ratio_stats([a / b for a, b in zip(n["round_medians_ms"], f["round_medians_ms"], strict=True)])
    print(f"flagos throughput / native: {common.format_ratio(ratio)} ({ratio['pairs']} rounds)")
    report = {"args": {k: v for k, v in vars(args).items() if k not in ("out", "child")}, "sides": sides}
    report["ratio"] = ratio
    print(f"wrote {common.write('ddp-step', report, args.out, smoke=args.smoke)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
