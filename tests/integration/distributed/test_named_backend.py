"""Collectives on flagos tensors in a group made with the backend CUDA code names ("nccl" on a CUDA
backing, "gloo" on host memory): PyTorch's own ProcessGroup runs them through that backend on the
tensors' native aliases (torch_fl/csrc/route/collectives.cpp), with the same results as the flagos
backend's, and a group with no backend for the memory behind flagos says what to do."""

from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist

import torch_fl
from tests.integration.distributed import launch, references
from tests.integration.distributed.cases_training import DDP_VARIANTS
from tests.integration.distributed.test_multiprocess import _no_errors, _same

pytestmark = pytest.mark.anyplatform

NAMED = "nccl" if torch_fl.backing() == "cuda" else "gloo"


@pytest.fixture(scope="module", params=[1, 2], ids=lambda w: f"world{w}")
def results(request, tmp_path_factory):
    world = request.param  # 1: NCCL on a machine of one GPU
    launch.needs_devices(world)
    run = launch.spawn(world, "collectives,ddp,fsdp2", tmp_path_factory.mktemp(f"named{world}"), "--init", "named")
    assert run.returncodes == [0] * world, run.log()
    return [run.results(r) for r in range(world)]


def test_the_group_is_pytorchs_own(results):
    for res in results:
        assert res["group_type"] == "ProcessGroup" and res["backend"] == NAMED and res["engines"] == {}


def test_every_collective_matches_the_reference(results):
    _no_errors(results, "collectives")
    for r, res in enumerate(results):
        for name, want in references.collectives(len(results), r, gloo_group=NAMED == "gloo").items():
            _same(res[name], want, f"rank{r}.{name}")


@pytest.mark.parametrize("variant", sorted(DDP_VARIANTS))
def test_ddp_trains_like_the_reference(results, variant):
    _no_errors(results, "ddp")
    want = references.ddp(variant, len(results))
    for r, res in enumerate(results):
        _same(res[f"ddp_{variant}"], want, f"rank{r}.ddp_{variant}")
        assert res[f"ddp_{variant}_grad_devices"] == ["flagos"]


def test_fsdp2_trains_like_the_reference(results):
    _no_errors(results, "fsdp2")
    want = references.fsdp2(len(results), bf16=False)
    for r, res in enumerate(results):
        _same(res["fsdp2_fp32"], want, f"rank{r}.fsdp2_fp32")


def test_a_group_without_a_backend_for_the_backing_memory_names_the_fix():
    other = "cuda" if torch_fl.backing() == "cpu" else "cpu"
    dist.init_process_group(
        f"{other}:gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=datetime.timedelta(seconds=30)
    )
    try:
        x = torch.ones(3, device="flagos")
        with pytest.raises(RuntimeError, match=r"c10d::allreduce_ .*init_process_group\(\"flagos\"\)"):
            dist.all_reduce(x)
        assert x.tolist() == [1.0, 1.0, 1.0]
    finally:
        dist.destroy_process_group()


def test_cpp_callers_of_the_flagos_backend_reach_its_engines():
    # ProcessGroup.gather called as PyTorch's C++ does (its Python trampoline does not forward gather):
    # the c10d:: operator gets the flagos tensors, and the engine the group registered for the backing device
    # runs on their aliases.
    dist.init_process_group("flagos", store=dist.HashStore(), rank=0, world_size=1)
    try:
        pg = dist.group.WORLD
        assert type(pg).__name__ == "FlagosProcessGroup"
        x = torch.arange(4.0, device="flagos")
        out = [[torch.zeros(4, device="flagos")]]
        opts = dist.GatherOptions()
        opts.rootRank = 0
        work = torch._C._distributed_c10d.ProcessGroup.gather(pg, out, [x], opts)
        work.wait()
        assert out[0][0].device.type == "flagos" and out[0][0].tolist() == [0.0, 1.0, 2.0, 3.0]
        assert work.get_future().wait()[0] is out[0][0]  # the caller's tensor, not its alias
    finally:
        dist.destroy_process_group()
