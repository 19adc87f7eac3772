"""One rank of a distributed test run: `python -m tests.integration.distributed.worker CASES --out DIR`,
launched by launch.py (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment) or by torchrun.

Each case's results (tensors as CPU copies) or its traceback go to DIR/rank<r>.pt; the tests compare
them with single-process references. `--init` picks how the group is made: `default` (no backend
named), `flagos`, `mixed` ("cpu:gloo,flagos:flagos"), `named` (the backend CUDA code names: "nccl" on a
CUDA backing, "gloo" on host memory), and `--device-id` binds the group to the rank's
flagos device. `--die` makes the last rank exit right after init (the others must then fail, not hang).
"""

from __future__ import annotations

import argparse
import datetime
import faulthandler
import gc
import os
import pathlib
import sys
import time
import traceback

import torch
import torch.distributed as dist

import torch_fl  # registers the flagos device and backend

INITS = {
    "default": None,
    "flagos": "flagos",
    "mixed": "cpu:gloo,flagos:flagos",
    "named": "nccl" if torch_fl.backing() == "cuda" else "gloo",
}


def _cpu(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, dict):
        return {k: _cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cpu(v) for v in value)
    return value


def main(argv=None) -> int:
    from tests.integration.distributed import cases_collectives, cases_training

    parser = argparse.ArgumentParser()
    parser.add_argument("cases", help="comma-separated: collectives,ddp,fsdp2,dtensor,dcp,split")
    parser.add_argument("--out", required=True)
    parser.add_argument("--init", choices=sorted(INITS), default="default")
    parser.add_argument("--device-id", action="store_true")
    parser.add_argument("--die", action="store_true")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    # a hang shows where each rank stands, and ends
    faulthandler.dump_traceback_later(args.timeout + 30, exit=True)
    rank = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    dev = torch.device("flagos", local % torch.flagos.device_count())
    torch.flagos.set_device(dev)
    dist.init_process_group(
        INITS[args.init],
        timeout=datetime.timedelta(seconds=args.timeout),
        device_id=dev if args.device_id else None,
    )
    results = {"world_size": dist.get_world_size(), "backend": str(dist.get_backend())}
    results["group_type"] = type(dist.group.WORLD).__name__
    results["engines"] = {k: type(v).__name__ for k, v in getattr(dist.group.WORLD, "_engines", {}).items()}
    if args.die:
        dist.barrier()
        if rank == dist.get_world_size() - 1:
            os._exit(3)
        time.sleep(1.0)
        try:
            dist.all_reduce(torch.ones(4, device=dev))
            results["die_error"] = None
        except Exception as error:  # the expected outcome: recorded for the test to check
            results["die_error"] = f"{type(error).__name__}: {error}"
        torch.save(results, out / f"rank{rank}.pt")
        os._exit(0)  # the group cannot be torn down cleanly with a dead peer
    runners = {
        "collectives": lambda: cases_collectives.collectives(dev),
        "ddp": lambda: cases_training.ddp(dev),
        "fsdp2": lambda: cases_training.fsdp2(dev),
        "dtensor": lambda: cases_training.dtensor(dev),
        "dcp": lambda: cases_training.dcp(dev, out),
        "split": lambda: cases_training.split(dev),
    }
    errors = {}
    for case in filter(None, args.cases.split(",")):
        try:
            results.update(_cpu(runners[case]()))
        except Exception:
            errors[case] = traceback.format_exc()
            print(f"[rank{rank}] case {case} failed:\n{errors[case]}", file=sys.stderr)
    results["errors"] = errors
    torch.save(results, out / f"rank{rank}.pt")
    # The cases' DDP/FSDP modules may sit in cycles holding the group; only its last reference joins gloo's
    # threads, which otherwise can free work tensors during interpreter finalization and abort the process.
    gc.collect()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
