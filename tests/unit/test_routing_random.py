"""Random operators on the cpu_fallback route draw from the flagos generator of the call's device
(torch_fl/backends/cpu_random.py): reproducible under torch.flagos.manual_seed, the CPU's own generator
untouched, on host backing the native route's numbers; routed away and back, their native route still draws so.

Routing a random operator registers its kernel for the rest of the process (routing/registry.py), and on host
backing that kernel's native state no longer refuses a flagos generator given to a call without flagos
tensors, which tests/integration/test_device_contract.py checks. So the tests that route random operators
run in a child process of their own (test_random_operator_routes_in_a_child_process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch

import torch_fl
from tests.helpers import REPO
from tests.unit.routing_fixtures import no_flag_gems  # noqa: F401  (a fixture)
from torch_fl import routing
from torch_fl.routing import planner, registry
from torch_fl.vocab.errors import FallbackWarning

pytestmark = pytest.mark.anyplatform

_CHILD = "TORCH_FL_TEST_RANDOM_ROUTES"
in_child = pytest.mark.skipif(
    os.environ.get(_CHILD) != "1",
    reason="routes random operators: runs in test_random_operator_routes_in_a_child_process",
)


def row(op, backend):
    return next((s for s in routing.stats() if s.op == op and s.backend == backend), None)


@pytest.mark.skipif(os.environ.get(_CHILD) == "1", reason="the child itself")
def test_random_operator_routes_in_a_child_process():
    env = {**os.environ, _CHILD: "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    assert " passed" in p.stdout and "skipped" in p.stdout  # the child ran them (and skipped only this test)


# A random operator routed to cpu_fallback -> a flagos call of it.
RANDOM_DRAWS = {
    "randn": lambda d: torch.randn(16, device=d),
    "rand_like": lambda d: torch.rand_like(torch.ones(16, device=d)),
    "randint.low": lambda d: torch.randint(0, 100, (16,), device=d),
    "randperm": lambda d: torch.randperm(20, device=d),
    "normal_": lambda d: torch.empty(16, device=d).normal_(),
    "uniform_": lambda d: torch.empty(16, device=d).uniform_(),
    "bernoulli_.float": lambda d: torch.empty(16, device=d).bernoulli_(0.5),
    "bernoulli": lambda d: torch.bernoulli(torch.full((16,), 0.5, device=d)),
    "random_": lambda d: torch.empty(16, device=d).random_(),
    "exponential_": lambda d: torch.empty(16, device=d).exponential_(),
    "multinomial": lambda d: torch.multinomial(torch.ones(16, device=d), 8),
    "poisson": lambda d: torch.poisson(torch.ones(16, device=d)),
    "native_dropout": lambda d: torch.nn.functional.dropout(torch.ones(64, device=d), 0.5, training=True),
}


@in_child
@pytest.mark.parametrize("op", list(RANDOM_DRAWS))
def test_random_operators_on_cpu_fallback_draw_from_the_flagos_generator(routing_state, op):
    draw = RANDOM_DRAWS[op]
    routing.set_route(op, "cpu_fallback")
    cpu_state = torch.get_rng_state()
    routing.reset_stats()
    torch.flagos.manual_seed(3)
    first = [draw("flagos").cpu() for _ in range(2)]
    assert row(op, "cpu_fallback").calls == 2  # the route ran
    assert torch.equal(torch.get_rng_state(), cpu_state)  # the CPU's own generator is untouched
    torch.flagos.manual_seed(3)
    assert all(torch.equal(draw("flagos").cpu(), f) for f in first)  # reproducible under flagos's seed
    if torch_fl.backing() == "cpu":  # the native route's numbers: the CPU kernel, drawing from the same state
        torch.manual_seed(3)
        assert all(torch.equal(draw("cpu"), f) for f in first)


@in_child
def test_cpu_fallback_draws_on_a_device_take_that_devices_generator(routing_state):
    if torch.flagos.device_count() < 2:
        pytest.skip("needs two flagos devices (FLAGOS_HOST_DEVICES=2 on host backing)")
    routing.set_route("normal_", "cpu_fallback")

    def draws(order):
        torch.flagos.manual_seed_all(1)
        with torch.flagos.device(1):
            torch.flagos.manual_seed(2)
        return {i: torch.empty(8, device=f"flagos:{i}").normal_().cpu() for i in order}

    first, second = draws([0, 1]), draws([1, 0])
    assert all(torch.equal(first[i], second[i]) for i in (0, 1))  # one device's draw leaves the other's alone
    if torch_fl.backing() == "cpu":
        got = draws([1])[1]
        assert torch.equal(got, torch.empty(8).normal_(generator=torch.Generator().manual_seed(2)))


@in_child
def test_a_random_cpu_fallback_takes_the_generator_it_is_given(routing_state):
    routing.set_route("randn.generator", "cpu_fallback")
    g = torch.Generator(device="flagos").manual_seed(4)
    got = torch.randn(8, device="flagos", generator=g).cpu()
    g.manual_seed(4)
    assert torch.equal(torch.randn(8, device="flagos", generator=g).cpu(), got)
    if torch_fl.backing() == "cpu":
        assert torch.equal(got, torch.randn(8, generator=torch.Generator().manual_seed(4)))


@in_child
def test_only_random_operators_leave_the_cpp_cpu_fallback(routing_state):
    from torch_fl.routing import kernels

    routing.set_route("add.Tensor", "cpu_fallback")
    routing.set_route("normal_", "cpu_fallback")
    kind = {
        op: kernels.core_targets(op, registry.plan_of(op), planner._kernel_failed)[0].kind for op in registry.REGISTERED
    }
    assert kind["add.Tensor"] == "cpu_fallback"  # the C++ fallback: no Python on its calls
    assert kind["normal_"] == "kernel"  # decided when the route is planned, not per call


@in_child
def test_a_random_cpu_fallback_logs_as_the_fallback_does(routing_state, capfd):
    routing.set_route("normal_", "cpu_fallback")
    planner.set_flags(log_fallback=True)  # kernels built with the flag on
    torch.empty(4, device="flagos").normal_()
    assert "[flagos cpu_fallback] aten::normal_" in capfd.readouterr().err
    planner.set_flags(log_fallback=False)
    torch.empty(4, device="flagos").normal_()
    assert "[flagos cpu_fallback]" not in capfd.readouterr().err


def test_the_device_backings_random_fallback_copies_through_the_host(routing_state, monkeypatch):
    """What a CUDA backing runs, here on flagos tensors (not host memory to the kernel either): host copies in,
    a CPU generator seeded by a draw from the device's generator, written arguments and results copied back."""
    from torch_fl.backends import cpu_random

    monkeypatch.setattr(cpu_random, "_device_default", lambda i: torch.Generator().manual_seed(100 + i))

    def seeded(seed):  # the CPU generator the kernel makes from a generator seeded `seed`
        draw = torch.randint(0, 2**63 - 1, (), generator=torch.Generator().manual_seed(seed))
        return torch.Generator().manual_seed(int(draw))

    x = torch.empty(4, device="flagos")
    assert cpu_random._device_kernel("normal_")(x, 0.0, 1.0, generator=None) is x
    assert torch.equal(x.cpu(), torch.empty(4).normal_(generator=seeded(100)))
    last = torch.flagos.device_count() - 1
    made = cpu_random._device_kernel("randn")([3], dtype=None, layout=None, device=torch.device("flagos", last))
    assert made.device == torch.device("flagos", last)
    assert torch.equal(made.cpu(), torch.randn(3, generator=seeded(100 + last)))
    out = torch.empty(1, device="flagos")
    assert cpu_random._device_kernel("randn.out")([5], out=out) is out and out.shape == (5,)
    mask_out = torch.empty(0, device="flagos", dtype=torch.bool)
    given = torch.Generator().manual_seed(7)
    y, mask = cpu_random._device_kernel("native_dropout.out")(
        torch.ones(8, device="flagos"), 0.5, True, out0=torch.empty(0, device="flagos"), out1=mask_out
    )
    assert mask is mask_out and mask.dtype == torch.bool and torch.equal(y.cpu(), mask.cpu().float() * 2)
    assert torch.equal(
        cpu_random._device_kernel("poisson")(x.abs(), given).cpu(), torch.poisson(x.cpu().abs(), seeded(7))
    )
    assert cpu_random._device_kernel("add.Tensor") is None


@in_child
@pytest.mark.usefixtures("no_flag_gems")
@pytest.mark.parametrize("op", ["randn", "normal_", "native_dropout"])
@pytest.mark.parametrize("away", ["cpu_fallback", "flaggems"])  # flaggems: unavailable, its calls run natively
def test_a_random_operator_routed_away_and_back_draws_from_the_flagos_generator(op, away):
    draw = RANDOM_DRAWS[op]
    with routing.route({op: away}), warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        routed = draw("flagos")  # the operator's kernel is registered now, for the rest of the process
        if away == "flaggems":  # its fallback is the native route too
            cpu_state = torch.get_rng_state()
            torch.flagos.manual_seed(5)
            fell_back = draw("flagos").cpu()
            assert torch.equal(torch.get_rng_state(), cpu_state)
    assert routed.device.type == "flagos"
    for back in ("native", None):  # routed to native, then no route at all
        if back is None:
            routing.clear_route(op)
        else:
            routing.set_route(op, back)
        cpu_state = torch.get_rng_state()
        torch.flagos.manual_seed(5)
        got = draw("flagos").cpu()
        assert torch.equal(torch.get_rng_state(), cpu_state)  # not the CPU's generator
        torch.flagos.manual_seed(5)
        assert torch.equal(draw("flagos").cpu(), got)
        if away == "flaggems":
            assert torch.equal(got, fell_back)
        if torch_fl.backing() == "cpu":
            torch.manual_seed(5)
            assert torch.equal(draw("cpu"), got)
