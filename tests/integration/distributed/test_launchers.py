"""torchrun (one node, and two "nodes" on localhost through c10d rendezvous), the explicit backend
name, and a rank that dies: the others get an error, not a hang."""

from __future__ import annotations

import pytest
import torch

from tests.integration.distributed import launch, references

pytestmark = pytest.mark.anyplatform


def _check_collectives(run, world):
    assert run.returncodes == [0] * len(run.returncodes), run.log()
    for r in range(world):
        res = run.results(r)
        assert res["errors"] == {}, res["errors"]
        assert res["group_type"] == "FlagosProcessGroup" and res["world_size"] == world
        assert torch.equal(res["all_reduce_sum"], references.collectives(world, r)["all_reduce_sum"])
        assert res["ddp_plain"].keys() == references.ddp("plain", world).keys()
    return [run.results(r) for r in range(world)]


def test_torchrun_one_node_with_the_backend_named(tmp_path):
    launch.needs_devices(2)
    run = launch.torchrun(1, 2, "collectives,ddp", tmp_path, "--init", "flagos")
    for res in _check_collectives(run, 2):
        assert res["backend"] == "flagos"


def test_torchrun_two_nodes_through_c10d_rendezvous(tmp_path):
    launch.needs_devices(2)
    _check_collectives(launch.torchrun(2, 1, "collectives,ddp", tmp_path), 2)


def test_a_rank_that_dies_gives_the_others_an_error_not_a_hang(tmp_path):
    # the survivors' collective must fail well inside the group's timeout; a hang ends in the
    # launcher's timeout instead and fails here
    launch.needs_devices(2)
    run = launch.spawn(2, "", tmp_path, "--die", "--timeout", "60", timeout=120)
    assert run.returncodes[1] == 3, run.log()
    error = run.results(0)["die_error"]
    assert error is not None and (
        "closed" in error.lower() or "timed out" in error.lower() or "peer" in error.lower()
    ), error
