"""accelerate's checkpoints on flagos: `save_state`/`load_state` resume with the same random numbers on every flagos
device (accelerate keeps every CUDA device's generator, and for a device outside its list only the current one's)."""

from __future__ import annotations

import pytest

from tests.helpers import run_python

pytest.importorskip("accelerate")
pytestmark = pytest.mark.anyplatform

RESUME = """
import tempfile, torch, torch_fl
from accelerate import Accelerator
acc = Accelerator()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1))
model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
x = torch.randn(4, 8, device=acc.device)

def step():
    loss = model(x).pow(2).mean()
    acc.backward(loss)
    opt.step()
    opt.zero_grad()
    return loss.item()

step()
path = tempfile.mkdtemp()
acc.save_state(path)
first = [step() for _ in range(3)]
acc.load_state(path)
print("RESULT", acc.device, next(model.parameters()).device, first == [step() for _ in range(3)])
"""


def test_load_state_resumes_dropout_exactly_on_a_device_that_is_not_the_current_one():
    # One process trained on flagos:1 (ACCELERATE_TORCH_DEVICE) while flagos:0 stays the current device.
    env = {"FLAGOS_HOST_DEVICES": "2", "ACCELERATE_TORCH_DEVICE": "flagos:1", "FLAGOS_INTEGRATIONS": "accelerate"}
    done = run_python(RESUME, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RESULT flagos:1 flagos:1 True" in done.stdout, done.stdout + done.stderr[-2000:]
