"""torch.distributed on flagos against single-process references: 2 and 4 processes (gloo on host
memory; on a CUDA backing NCCL, one GPU per rank), and 1 process over NCCL on one GPU (cuda).

One launch per world size runs every case (collectives, DDP, FSDP2, DTensor, DCP); each test checks
one case's results on every rank. The 1- and 2-process runs make their group with no backend named
(PyTorch picks flagos's default), the 4-process run with "cpu:gloo,flagos:flagos" and a bound device.
"""

from __future__ import annotations

import pytest
import torch

import torch_fl
from tests.integration.distributed import launch, references
from tests.integration.distributed.cases_training import DDP_VARIANTS

pytestmark = pytest.mark.anyplatform

CASES = "collectives,ddp,fsdp2,dtensor,dcp"
RUNS = {1: ("--init", "default", "--device-id"), 2: ("--init", "default"), 4: ("--init", "mixed", "--device-id")}
ENGINE = "ProcessGroupNCCL" if torch_fl.backing() == "cuda" else "ProcessGroupGloo"


@pytest.fixture(scope="module", params=[pytest.param(1, marks=pytest.mark.cuda), 2, 4], ids=lambda w: f"world{w}")
def run(request, tmp_path_factory):
    world = request.param
    launch.needs_devices(world)
    extra = (",split",) if "--device-id" in RUNS[world] else ()
    result = launch.spawn(world, CASES + "".join(extra), tmp_path_factory.mktemp(f"world{world}"), *RUNS[world])
    assert result.returncodes == [0] * world, result.log()
    return world, [result.results(r) for r in range(world)]


def _same(got, want, name, atol=1e-5):
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{name}: {got!r}"
        assert got.shape == want.shape and torch.allclose(got.float(), want.float(), atol=atol), (
            f"{name}:\n{got}\n!=\n{want}"
        )
    elif isinstance(want, dict):
        assert set(got) == set(want), name
        for k in want:
            _same(got[k], want[k], f"{name}.{k}", atol)
    else:
        assert got == want, f"{name}: {got!r} != {want!r}"


def _no_errors(results, case):
    for r, res in enumerate(results):
        assert case not in res["errors"], f"rank {r}:\n{res['errors'][case]}"


def test_the_group_is_flagos(run):
    world, results = run
    for res in results:
        assert res["group_type"] == "FlagosProcessGroup" and res["world_size"] == world
        assert res["engines"][launch.NATIVE] == ENGINE and res["engines"]["cpu"] == "ProcessGroupGloo"


def test_every_collective_matches_the_reference(run):
    world, results = run
    _no_errors(results, "collectives")
    for r, res in enumerate(results):
        for name, want in references.collectives(world, r).items():
            _same(res[name], want, f"rank{r}.{name}")


@pytest.mark.parametrize("variant", sorted(DDP_VARIANTS))
def test_ddp_trains_like_the_reference(run, variant):
    world, results = run
    _no_errors(results, "ddp")
    want = references.ddp(variant, world)
    for r, res in enumerate(results):
        _same(res[f"ddp_{variant}"], want, f"rank{r}.ddp_{variant}")
        assert res[f"ddp_{variant}_grad_devices"] == ["flagos"]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_fsdp2_trains_like_the_reference(run, precision):
    world, results = run
    _no_errors(results, "fsdp2")
    want = references.fsdp2(world, bf16=precision == "bf16")
    for r, res in enumerate(results):
        _same(res[f"fsdp2_{precision}"], want, f"rank{r}.fsdp2_{precision}", atol=1e-5 if precision == "fp32" else 2e-2)
        assert res[f"fsdp2_{precision}_local_device"] == "flagos"


def test_dtensor_ops_match_the_full_tensors(run):
    world, results = run
    _no_errors(results, "dtensor")
    torch.manual_seed(5)
    a, b = torch.randn(2 * world, 3), torch.randn(3, 4)
    for r, res in enumerate(results):
        assert res["dtensor_local_device"] == "flagos"
        _same(res["dtensor_add"], a + 1, "add")
        _same(res["dtensor_mm"], a @ b, "mm")
        _same(res["dtensor_sum"], a.sum(), "sum")
        _same(res["dtensor_redistribute"], a, "redistribute")
        _same(res["dtensor_shard1"], a.chunk(world)[r], "shard1")
        if world == 4:
            tp_peer = r ^ 1  # mesh (2, 2): the tp groups are [0, 1] and [2, 3]
            _same(res["mesh2d_tp_all_reduce"], torch.full((3,), float(r + tp_peer)), "mesh2d tp")
            _same(res["mesh2d_dtensor"], a * 2, "mesh2d dtensor")


def test_dcp_round_trip_restores_the_sharded_state(run):
    world, results = run
    _no_errors(results, "dcp")
    for res in results:
        _same(res["dcp_loaded"], res["dcp_saved"], "dcp model")
        _same(res["dcp_extra"], torch.arange(4), "dcp extra")
        assert res["dcp_extra_device"] == "flagos"


def test_split_group_all_reduces_within_each_half(run):
    world, results = run
    if world == 2:
        pytest.skip("the 1- and 4-process runs are the ones bound to a device (split_group needs that)")
    _no_errors(results, "split")
    for r, res in enumerate(results):
        half = range(world) if world == 1 else range(0, 2) if r < 2 else range(2, 4)
        _same(res["split_group_all_reduce"], torch.full((2,), float(sum(q + 1 for q in half))), "split")
        assert res["split_group_size"] == len(half)
