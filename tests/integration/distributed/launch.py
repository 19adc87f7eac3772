"""Start N worker processes on this machine (or torchrun) and collect their results."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import pytest
import torch

import torch_fl

REPO = pathlib.Path(__file__).resolve().parents[3]
WORKER = "tests.integration.distributed.worker"
NATIVE = "cuda" if torch_fl.backing() == "cuda" else "cpu"


def needs_devices(world: int) -> None:
    """NCCL puts each rank on a GPU of its own; gloo on host memory runs any number of ranks."""
    if NATIVE == "cuda" and torch.flagos.device_count() < world:
        pytest.skip(f"{world} ranks over NCCL need {world} GPUs, this machine has {torch.flagos.device_count()}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("FLAGOS_HOST_DEVICES", "2")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _finish(procs, out: pathlib.Path, timeout: float):
    logs = []
    try:
        for p in procs:
            stdout, _ = p.communicate(timeout=timeout)
            logs.append(stdout)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return Run(out, [p.returncode for p in procs], logs)


class Run:
    def __init__(self, out: pathlib.Path, returncodes: list[int], logs: list[str]):
        self.out, self.returncodes, self.logs = out, returncodes, logs

    def results(self, rank: int) -> dict:
        path = self.out / f"rank{rank}.pt"
        assert path.exists(), f"rank {rank} wrote no results; logs:\n" + "\n".join(self.logs)[-6000:]
        return torch.load(path, weights_only=False)

    def log(self) -> str:
        return "\n".join(self.logs)[-6000:]


def spawn(world: int, cases: str, out: pathlib.Path, *args: str, timeout: float = 240) -> Run:
    """`world` worker processes rendezvousing through MASTER_ADDR/MASTER_PORT (env://)."""
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", WORKER, cases, "--out", str(out), *args],
            cwd=REPO,
            env=_env(RANK=r, LOCAL_RANK=r, WORLD_SIZE=world, MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    return _finish(procs, out, timeout)


def torchrun(nodes: int, per_node: int, cases: str, out: pathlib.Path, *args: str, timeout: float = 240) -> Run:
    """torchrun on one node (--standalone) or `nodes` "nodes" on localhost through c10d rendezvous."""
    out.mkdir(parents=True, exist_ok=True)
    if nodes == 1:
        launcher = ["--standalone", "--nnodes", "1"]
    else:
        port = free_port()
        launcher = ["--nnodes", str(nodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"]
        launcher += ["--rdzv-id", f"flagos-{port}"]
    cmd = [sys.executable, "-m", "torch.distributed.run", *launcher, "--nproc-per-node", str(per_node)]
    cmd += ["-m", WORKER, cases, "--out", str(out), *args]
    procs = [
        subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(nodes)
    ]
    return _finish(procs, out, timeout)
