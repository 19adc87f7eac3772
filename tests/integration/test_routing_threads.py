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

import pytest

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
