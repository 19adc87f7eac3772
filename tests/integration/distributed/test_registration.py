"""The flagos backend is registered at import, through torch.distributed's public API."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import torch_fl

pytestmark = pytest.mark.anyplatform


def test_flagos_is_the_default_backend_of_the_flagos_device():
    assert torch_fl.distributed.BACKEND_NAME == "flagos"
    assert dist.Backend.default_device_backend_map["flagos"] == "flagos"
    assert dist.Backend("flagos") == "flagos"
    assert set(dist.Backend.backend_capability["flagos"]) == {"cpu", "flagos"}
    # PyTorch's own backends keep their devices, and those that serve the memory behind flagos serve flagos
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"
    assert dist.Backend.backend_capability["gloo"] == ["cpu", "cuda", "flagos"]
    assert ("flagos" in dist.Backend.backend_capability["nccl"]) == (torch_fl.backing() == "cuda")


def test_registering_again_changes_nothing():
    def state():
        return (
            dict(dist.Backend.default_device_backend_map),
            list(dist.Backend.backend_list),
            {k: list(v) for k, v in dist.Backend.backend_capability.items()},
        )

    before = state()
    torch_fl.distributed.register()
    torch_fl.distributed.registration._registered = False  # the registration itself, run a second time
    try:
        torch_fl.distributed.register()
    finally:
        torch_fl.distributed.registration._registered = True
    assert state() == before


def test_dcp_stages_flagos_tensors_even_where_cuda_is_available(monkeypatch):
    # DCP's writer copies to the host the tensors of one device type, asked from a lookup that puts
    # CUDA first; with flagos over CUDA that skipped flagos tensors. Here CUDA is made to look available.
    import torch.distributed.checkpoint.filesystem as filesystem

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert filesystem._get_available_device_type() == "flagos"
    loader = filesystem._OverlappingCpuLoader(lambda t: t, inflight_threshhold=1 << 20)
    loader.add(16, torch.arange(4.0, device="flagos"))
    ((staged, _),) = list(loader.values())
    assert staged.is_cpu and staged.tolist() == [0.0, 1.0, 2.0, 3.0]
