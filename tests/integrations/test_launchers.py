"""Trainer under the launchers people use, two processes: torchrun, torchrun as two nodes on this machine,
and accelerate launch. DDP over the "flagos" process-group backend (gloo on host memory, NCCL on GPUs):
every rank ends with the weights of the same run on the CPU (gloo)."""

from __future__ import annotations

import json
import sys

import pytest

from tests.integration.distributed.launch import free_port, needs_devices

pytest.importorskip("transformers")
pytestmark = pytest.mark.anyplatform

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def ranks(folder) -> list[dict]:
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.fixture(scope="module")
def cpu_reference(tmp_path_factory):
    from tests.integrations.conftest import run_program

    out = tmp_path_factory.mktemp("cpu")
    launcher = TORCHRUN + ["--nproc-per-node", "2", "--master-port", str(free_port())]
    finished = run_program("launched_trainer.py", str(out), "--cpu", launcher=launcher)
    assert finished.proc.returncode == 0, finished.tail()
    return ranks(out)[0]["checksum"]


def launchers(port: int) -> dict[str, list[list[str]]]:
    """Each launch's command lines (two nodes: two commands started together)."""
    node = TORCHRUN + ["--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "127.0.0.1"]
    return {
        "torchrun": [TORCHRUN + ["--nproc-per-node", "2", "--master-port", str(port)]],
        "two-nodes": [node + ["--node-rank", str(n), "--master-port", str(port)] for n in range(2)],
        "accelerate": [
            [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
            + ["--main_process_port", str(port)]
        ],
    }


@pytest.mark.parametrize("how", ["torchrun", "two-nodes", "accelerate"])
def test_ddp_trainer(how, cpu_reference, tmp_path):
    import threading

    from tests.integrations.conftest import run_program

    needs_devices(2)
    if how == "accelerate":
        pytest.importorskip("accelerate")
    commands = launchers(free_port())[how]
    results = [None] * len(commands)

    def start(i, launcher):
        results[i] = run_program("launched_trainer.py", str(tmp_path), launcher=launcher)

    threads = [threading.Thread(target=start, args=(i, c)) for i, c in enumerate(commands)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for finished in results:
        assert finished.proc.returncode == 0, finished.tail()
    got = ranks(tmp_path)
    # Two nodes of one process each: each node's process is local rank 0, so both use flagos:0.
    devices = ["flagos:0", "flagos:0"] if how == "two-nodes" else ["flagos:0", "flagos:1"]
    assert [r["device"] for r in got] == devices
    for r in got:
        assert r["processes"] == 2 and r["backend"] == "flagos", r
        assert abs(r["checksum"] - cpu_reference) <= 1e-4 * abs(cpu_reference), (r, cpu_reference)
