"""Trainer under the launchers people use, two processes: torchrun, torchrun as two nodes on this machine,
and accelerate launch. DDP over the "flagos" process-group backend (gloo on host memory, NCCL on GPUs):
every rank ends with the weights of the same run on the CPU (gloo). accelerate with an FSDP plugin shards
on flagos, and its collectives take NCCL's forms."""

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
        assert finished.proc.returncode == 0, (_ranks_said(finished), finished.tail())
    got = ranks(tmp_path)
    # Two nodes of one process each: each node's process is local rank 0, so both use flagos:0.
    devices = ["flagos:0", "flagos:0"] if how == "two-nodes" else ["flagos:0", "flagos:1"]
    assert [r["device"] for r in got] == devices
    for r in got:
        assert r["processes"] == 2 and r["backend"] == "flagos", r
        assert abs(r["checksum"] - cpu_reference) <= 1e-4 * abs(cpu_reference), (r, cpu_reference)


def _ranks_said(finished) -> list[str]:
    """The ranks' own last lines (the launcher's tail names only the rank that failed, not why)."""
    return [line for line in finished.output.splitlines() if line.startswith("[rank") or "terminate" in line][-40:]


def test_accelerate_fsdp_and_collectives(tmp_path):
    from tests.integrations.conftest import run_program

    needs_devices(2)
    pytest.importorskip("accelerate")
    got = {}
    for side in ("cpu", "flagos"):
        folder = tmp_path / side
        folder.mkdir()
        launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
        launcher += ["--main_process_port", str(free_port())]
        flags = ["--cpu"] if side == "cpu" else []
        finished = run_program("launched_accelerate.py", str(folder), *flags, launcher=launcher)
        assert finished.proc.returncode == 0, (side, _ranks_said(finished), finished.tail())
        got[side] = ranks(folder)
    for r, (cpu, flagos) in enumerate(zip(got["cpu"], got["flagos"], strict=True)):
        # the plugin is honoured (it was dropped for DDP), and FSDP trains to DDP's weights
        assert (flagos["distributed_type"], flagos["device"]) == ("DistributedType.FSDP", f"flagos:{r}"), flagos
        if r == 0:  # FSDP's full state dict is gathered to rank 0
            assert abs(flagos["checksum"] - cpu["checksum"]) <= 1e-4 * abs(cpu["checksum"]), (flagos, cpu)
        assert flagos["gather"] == cpu["gather"] == [[0, 0], [1, 1]]
        assert flagos["pad_gather"] == cpu["pad_gather"] and len(flagos["pad_gather"]) == 4
        assert flagos["mean"] == cpu["mean"], (flagos, cpu)
