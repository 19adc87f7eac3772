"""The flagos backend is registered at import, through torch.distributed's public API."""

from __future__ import annotations

import pytest
import torch.distributed as dist

import torch_fl

pytestmark = pytest.mark.anyplatform


def test_flagos_is_the_default_backend_of_the_flagos_device():
    assert torch_fl.distributed.BACKEND_NAME == "flagos"
    assert dist.Backend.default_device_backend_map["flagos"] == "flagos"
    assert dist.Backend("flagos") == "flagos"
    assert set(dist.Backend.backend_capability["flagos"]) == {"cpu", "flagos"}
    # PyTorch's own backends keep their devices
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"
    assert "flagos" not in dist.Backend.backend_capability["gloo"]


def test_registering_again_changes_nothing():
    before = dict(dist.Backend.default_device_backend_map), list(dist.Backend.backend_list)
    torch_fl.distributed.register()
    assert (dict(dist.Backend.default_device_backend_map), list(dist.Backend.backend_list)) == before
