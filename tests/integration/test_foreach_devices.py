"""A _foreach call whose tensors span flagos devices runs as CUDA's does (ATen's slow path): element by element,
each element's call on its own device and route; an element whose tensors mix devices raises CUDA's error."""

from __future__ import annotations

import pytest
import torch

from tests.integration.test_device_mismatch import mismatch
from tests.unit.routing_fixtures import routing_state  # noqa: F401
from torch_fl import routing

pytestmark = [
    pytest.mark.anyplatform,
    pytest.mark.skipif(
        torch.flagos.device_count() < 2, reason="needs two flagos devices (FLAGOS_HOST_DEVICES=2 on host backing)"
    ),
]


def _lists(*devices):
    return [torch.full((3,), float(i + 1), device=d) for i, d in enumerate(devices)]


FOREACH_SPANNING = {
    "_foreach_add (boxed route)": lambda xs, ys: torch._foreach_add(xs, ys, alpha=2),
    "_foreach_add_ (typed route)": lambda xs, ys: torch._foreach_add_(xs, ys, alpha=2) or xs,
    "_foreach_mul_.Scalar (typed route)": lambda xs, ys: torch._foreach_mul_(xs, 3.0) or xs,
    "_foreach_lerp_": lambda xs, ys: torch._foreach_lerp_(xs, ys, 0.5) or xs,
    "_foreach_addcmul_.Tensor (CPU scalars)": lambda xs, ys: (
        torch._foreach_addcmul_(xs, ys, ys, torch.tensor([1.0, 2.0, 3.0])) or xs
    ),
    "_foreach_norm": lambda xs, ys: torch._foreach_norm(xs),
    "_foreach_maximum": lambda xs, ys: torch._foreach_maximum(xs, ys),
}


@pytest.mark.parametrize("call", FOREACH_SPANNING.values(), ids=FOREACH_SPANNING.keys())
def test_a_foreach_call_over_two_devices_runs_per_element_as_on_cuda(call):
    devices = ["flagos:0", "flagos:1", "flagos:0"]
    xs, ys = _lists(*devices), _lists(*reversed(devices))
    expected = call([x.cpu() for x in xs], [y.cpu() for y in ys])
    got = call(xs, ys)
    assert [t.device for t in got] == [torch.device(d) for d in devices]
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.cpu(), e)


def test_a_foreach_element_over_two_devices_raises():
    xs = _lists("flagos:0", "flagos:1")
    with mismatch("flagos:1", "flagos:0"):
        torch._foreach_add_(xs, _lists("flagos:0", "flagos:0"))
    assert xs[1].cpu().tolist() == [2.0, 2.0, 2.0]  # the element that mixes devices was not written
    with mismatch("flagos:1", "cpu"):
        torch._foreach_add(xs, [xs[0], torch.ones(3)])


@pytest.mark.usefixtures("routing_state")
def test_a_routed_foreach_call_over_two_devices_runs_per_element():
    xs = _lists("flagos:0", "flagos:1")
    with routing.route({"_foreach_add.List": "cpu_fallback"}):
        got = torch._foreach_add(xs, xs)
    assert [t.device for t in got] == [torch.device("flagos:0"), torch.device("flagos:1")]
    assert [t.cpu().tolist() for t in got] == [[2.0] * 3, [4.0] * 3]


def test_clip_grad_norm_over_two_devices_matches_the_cpu():
    # clip_grad_norm_ groups by device, then takes the norms' norm across devices: as on CUDA, it runs.
    params = [torch.nn.Parameter(torch.ones(4, device=d)) for d in ("flagos:0", "flagos:1")]
    reference = [torch.nn.Parameter(torch.ones(4)) for _ in params]
    for p, r, g in zip(params, reference, (3.0, 4.0), strict=True):
        p.grad, r.grad = torch.full((4,), g, device=p.device), torch.full((4,), g)
    norm = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
    expected = torch.nn.utils.clip_grad_norm_(reference, 1.0, foreach=True)
    torch.testing.assert_close(norm.cpu(), expected)
    for p, r in zip(params, reference, strict=True):
        torch.testing.assert_close(p.grad.cpu(), r.grad)
