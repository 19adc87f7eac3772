"""torch.flagos's RNG-state functions inside compiled code run eagerly, as torch.cuda's do: torch.testing's
freeze_rng_state (OpInfos of random operators use it) and torch.random.fork_rng read and restore the device's
state around the code they wrap. Dynamo traced into them and reached Generator.set_state with a fake tensor."""

from __future__ import annotations

import pytest
import torch

import torch_fl  # noqa: F401  (torch.flagos)

pytestmark = pytest.mark.anyplatform


def test_fork_rng_in_compiled_code_restores_the_flagos_state():
    torch._dynamo.reset()
    x = torch.rand(16, device="flagos")

    def fn(t):
        with torch.random.fork_rng(device_type="flagos"):
            torch.flagos.manual_seed(1)
            noise = torch.flagos.get_rng_state()
            return t + 1, noise

    before = torch.flagos.get_rng_state()
    out, state = torch.compile(fn)(x)
    torch.testing.assert_close(out.cpu(), x.cpu() + 1)
    torch.flagos.manual_seed(1)
    assert torch.equal(state, torch.flagos.get_rng_state())  # read inside, after the seed
    torch.flagos.set_rng_state(before)


def test_freeze_rng_state_around_a_compiled_random_operator():
    from torch.testing._utils import freeze_rng_state

    torch._dynamo.reset()
    x = torch.rand(64, device="flagos")

    def fn(t):
        with freeze_rng_state():
            torch.manual_seed(42)
            return torch.bernoulli(t)

    before = torch.flagos.get_rng_state()
    out = torch.compile(fn)(x)
    assert out.shape == x.shape and set(out.unique().cpu().tolist()) <= {0.0, 1.0}
    assert torch.equal(torch.flagos.get_rng_state(), before)


@pytest.mark.parametrize(
    "name",
    ["get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all", "manual_seed", "manual_seed_all"]
    + ["seed", "seed_all", "initial_seed"],
)
def test_rng_state_functions_run_eagerly_once_dynamo_is_imported(name):
    """Each is replaced by its Dynamo-disabled version, which keeps its name and documentation."""
    import torch._dynamo  # noqa: F401  (the replacement happens on its import)

    fn = getattr(torch.flagos, name)
    assert getattr(fn, "_flagos_eager", False), f"torch.flagos.{name} would be traced by Dynamo"
    assert fn.__name__ == name and fn.__doc__ == getattr(torch_fl.flagos._random, name).__doc__
