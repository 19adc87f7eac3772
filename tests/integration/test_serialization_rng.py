"""torch.save/torch.load of flagos tensors and reproducible random numbers."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from tests.conftest import NATIVE

pytestmark = pytest.mark.anyplatform


def roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)  # weights_only=True is the default


def test_tensor_roundtrip_keeps_device_and_values():
    last = torch.flagos.device_count() - 1
    x = torch.randn(3, 4, device=f"flagos:{last}")
    y = roundtrip(x)
    assert y.device == x.device
    torch.testing.assert_close(y.cpu(), x.cpu())


def test_state_dict_roundtrip_and_map_location():
    model = nn.Linear(4, 3).to("flagos")
    last = torch.flagos.device_count() - 1
    sd = roundtrip(model.state_dict(), map_location=f"flagos:{last}")
    assert all(v.device == torch.device("flagos", last) for v in sd.values())
    fresh = nn.Linear(4, 3).to(f"flagos:{last}")
    fresh.load_state_dict(sd)
    torch.testing.assert_close(fresh.weight.cpu(), model.weight.cpu())
    on_cpu = roundtrip(model.state_dict(), map_location="cpu")
    assert on_cpu["weight"].device.type == "cpu"
    to_flagos = roundtrip(nn.Linear(2, 2).state_dict(), map_location="flagos")
    assert to_flagos["weight"].device.type == "flagos"


def test_parameters_and_views_roundtrip():
    p = nn.Parameter(torch.randn(6, device="flagos"))
    views = {"param": p, "view": p.detach()[2:4]}
    out = roundtrip(views)
    assert isinstance(out["param"], nn.Parameter) and out["param"].device.type == "flagos"
    torch.testing.assert_close(out["view"].cpu(), p.detach()[2:4].cpu())


def test_manual_seed_makes_flagos_random_ops_reproducible():
    torch.manual_seed(123)
    a = torch.randn(16, device="flagos")
    b = torch.rand(16, device="flagos")
    torch.manual_seed(123)
    torch.testing.assert_close(torch.randn(16, device="flagos").cpu(), a.cpu(), rtol=0, atol=0)
    torch.testing.assert_close(torch.rand(16, device="flagos").cpu(), b.cpu(), rtol=0, atol=0)


def test_flagos_draws_from_the_backing_generator():
    torch.manual_seed(7)
    on_flagos = torch.randn(32, device="flagos").cpu()
    torch.manual_seed(7)
    native = torch.randn(32, device=NATIVE).cpu()
    torch.testing.assert_close(on_flagos, native, rtol=0, atol=0)


def test_generator_on_flagos():
    g = torch.Generator(device="flagos")
    g.manual_seed(5)
    a = torch.randn(8, device="flagos", generator=g)
    g.manual_seed(5)
    b = torch.randn(8, device="flagos", generator=g)
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)
    assert g.initial_seed() == 5


def test_rng_state_api():
    torch.flagos.manual_seed(11)
    state = torch.flagos.get_rng_state()
    a = torch.randn(4, device="flagos").cpu()
    torch.flagos.set_rng_state(state)
    torch.testing.assert_close(torch.randn(4, device="flagos").cpu(), a, rtol=0, atol=0)
    assert torch.flagos.initial_seed() == 11
    assert len(torch.flagos.default_generators) == torch.flagos.device_count()
    torch.flagos.manual_seed_all(3)
    assert all(g.initial_seed() == 3 for g in torch.flagos.default_generators)
    states = torch.flagos.get_rng_state_all()
    torch.flagos.set_rng_state_all(states)


def test_seeded_module_built_on_flagos_equals_native():
    torch.manual_seed(0)
    on_flagos = nn.Linear(8, 8, device="flagos")
    torch.manual_seed(0)
    native = nn.Linear(8, 8, device=NATIVE)
    torch.testing.assert_close(on_flagos.weight.cpu(), native.weight.cpu(), rtol=0, atol=0)
