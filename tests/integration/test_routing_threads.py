"""Route changes while other threads dispatch the same operators.

A call runs the old route or the new one, never a freed kernel: an operator's
kernel is registered once and its plan swapped (torch_fl/routing/registry.py).
Run in a child process, since the failure this guards against is a crash.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
import torch

from tests.unit.routing_fixtures import routing_state  # noqa: F401
from torch_fl import routing
from torch_fl.routing import state

pytestmark = pytest.mark.anyplatform

CHILD = textwrap.dedent(
    """
    import threading, warnings
    import torch, torch_fl
    from torch_fl import routing

    warnings.simplefilter("ignore")  # fallbacks to unavailable backends warn; not the point here
    stop = threading.Event()
    errors = []
    calls = [0] * 8
    x = torch.arange(6.0, device="flagos").reshape(2, 3)
    expected = {"add": (x + x).cpu(), "neg": (-x).cpu(), "mul": (x * x).cpu(), "sum": x.sum(0).cpu()}

    def work(i):
        try:
            while not stop.is_set():
                got = {"add": x + x, "neg": -x, "mul": x * x, "sum": x.sum(0)}
                for k, v in got.items():
                    if v.device.type != "flagos" or not torch.equal(v.cpu(), expected[k]):
                        errors.append((k, v.device, v.cpu()))
                calls[i] += 1
        except BaseException as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    backends = ["cpu_fallback", "native", "flaggems", "cpu_fallback"]
    for n in range(200):
        b = backends[n % len(backends)]
        routing.set_route("add.Tensor", b)
        routing.set_route("neg", b)
        with routing.route({"mul.Tensor[float32]": b, "sum.dim_IntList": "cpu_fallback"}):
            pass
        if n % 3 == 0:
            routing.clear_route("neg")
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    assert all(c > 0 for c in calls), calls
    print("ok", sum(calls))
    """
)


def test_route_changes_while_eight_threads_dispatch():
    env = {**os.environ, "FLAGOS_STRICT": "0"}
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout.startswith("ok"), r.stdout


@pytest.mark.usefixtures("routing_state")
def test_overlapping_route_blocks_of_two_threads_leave_the_table_as_it_was():
    """A enters route({add: cpu_fallback}), B enters route({add: native}), A exits, B exits: each exit undoes
    only its own block, so add.Tensor ends with no runtime route (it used to keep A's, silently)."""

    def add_route():
        return {e.op: (e.backend, e.source) for e in routing.table()}.get("add.Tensor")

    before = add_route()
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen, errors = {}, []

    def thread_a():
        try:
            with routing.route({"add.Tensor": "cpu_fallback"}):
                a_in.set()
                assert b_in.wait(60), "B never entered"
                seen["A, B inside"] = add_route()
            a_out.set()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            a_out.set()

    def thread_b():
        try:
            assert a_in.wait(60), "A never entered"
            with routing.route({"add.Tensor": "native"}):
                b_in.set()
                assert a_out.wait(60), "A never exited"
                seen["B inside, A out"] = add_route()
                x = torch.arange(3.0, device="flagos")
                seen["sum"] = (x + x).cpu()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            b_in.set()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning either
        threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    assert seen["A, B inside"] == ("native", "runtime")  # B entered last: its route is live
    assert seen["B inside, A out"] == ("native", "runtime")  # A's exit left B's route alone
    assert torch.equal(seen["sum"], torch.arange(3.0) * 2)
    assert add_route() == before and (before is None or before[1] != "runtime")
    assert not state.STATE.route_blocks
