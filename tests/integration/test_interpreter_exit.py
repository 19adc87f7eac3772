"""A process that ran a backward on flagos exits cleanly.

The autograd engine runs a flagos backward on its device thread, which may be the last to release the finished
graph task; the task holds Python objects, and a release that waits for the GIL while the interpreter starts
finalizing ends in std::terminate ("terminate called without an active exception", exit 134). torch_fl lets
those threads finish at exit, while the interpreter is whole (csrc/runtime/autograd_threads.h).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import threading

import pytest
import torch

import torch_fl

pytestmark = pytest.mark.anyplatform

# Each child: a small model forward and backward on every flagos device (a device thread each), then exit.
# Four intra-op threads per child and several children at once load the machine, which is when the device
# thread loses the race; a 0.2 s GIL switch interval makes its wait for the GIL span the start of
# finalization more often (0/10 exits aborted at 0.02 s, 2/10 at 0.2 s without the fix on a 2-core machine).
CHILD = """
import sys
import torch
import torch_fl

sys.setswitchinterval(0.2)
torch.set_num_threads(4)
for d in range(torch.flagos.device_count()):
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(f"flagos:{d}")
    x = torch.randn(32, 64, device=f"flagos:{d}")
    model(x).square().mean().backward()
"""
RUNS = 30
AT_ONCE = 6


def test_exit_after_backward_never_aborts():
    root = pathlib.Path(torch_fl.__file__).resolve().parents[1]  # this checkout's torch_fl, in the children too
    env = {**os.environ, "FLAGOS_HOST_DEVICES": os.environ.get("FLAGOS_HOST_DEVICES", "2")}
    failures = []
    for start in range(0, RUNS, AT_ONCE):
        children = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD], cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            for _ in range(min(AT_ONCE, RUNS - start))
        ]
        for child in children:
            _, err = child.communicate(timeout=300)
            text = err.decode(errors="replace")
            if child.returncode != 0 or "terminate" in text:
                failures.append(f"exit {child.returncode}: {text[-400:]}")
    assert failures == [], f"{len(failures)} of {RUNS} exits failed:\n" + "\n".join(failures)


def test_exit_waits_for_the_task_a_device_thread_is_running():
    # What the atexit handler relies on: the drain returns only once each device thread has finished the
    # task it was running (here held open by a gradient hook on the device thread), and says so when it
    # gives up waiting.
    started, release = threading.Event(), threading.Event()

    def hold(grad):
        started.set()
        release.wait(30)
        return grad

    x = torch.ones(4, device="flagos", requires_grad=True)
    y = x * 2
    y.register_hook(hold)
    backward = threading.Thread(target=lambda: y.sum().backward())
    backward.start()
    try:
        assert started.wait(30)
        assert torch_fl._C._drain_autograd_threads(0.2) == 1  # the hook's thread is still busy
    finally:
        release.set()
    assert torch_fl._C._drain_autograd_threads(30) == 0
    backward.join()
    assert x.grad.cpu().tolist() == [2.0] * 4


FORK = """
import os
import torch
import torch_fl

x = torch.ones(4, device="flagos", requires_grad=True)
(x * 2).sum().backward()
pid = os.fork()
if pid:
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
"""


def test_a_forked_child_exits_without_waiting_for_its_parents_threads():
    # The child has the parent's autograd queues but not their threads: a drain would wait its full timeout
    # for markers nobody takes, then warn.
    root = pathlib.Path(torch_fl.__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", FORK], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "autograd device thread" not in done.stderr
