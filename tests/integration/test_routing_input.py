"""Routing input in a fresh process: `* = cpu_fallback` keeps results on flagos and never recurses, and a
routing file that cannot be used fails at import with its name."""

from __future__ import annotations

import pytest

from tests.helpers import run_python

STAR = """
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch, torch_fl
notes = [str(w.message) for w in caught]
assert any("leaves" in n and "_to_cpu" in n for n in notes), notes
from torch_fl import routing
assert routing.table()  # the glob routes operators
assert torch.zeros(2, device="flagos").device.type == "flagos"
assert torch.ones(2).to("flagos").device.type == "flagos"
x = torch.randn(4, 3, device="flagos", requires_grad=True)
y = (x * 2 + 1).relu().sum()
y.backward()
assert y.device.type == "flagos" and x.grad.device.type == "flagos", (y.device, x.grad.device)
assert torch.equal(x.grad.cpu(), (x.detach().cpu() * 2 + 1).gt(0).float() * 2)
v = x.detach().t()  # a view stays a view: the fallback cannot run views
v[0, 0] = 5.0
assert x[0, 0].item() == 5.0
try:  # an out= error inside the fallback: a plain error, no recursion
    torch.add(x.detach(), 1, out=torch.empty(4, 3, dtype=torch.bool, device="flagos"))
except RuntimeError as e:
    assert "Bool" in str(e), e
else:
    raise AssertionError("no error")
print("ok")
"""


@pytest.mark.anyplatform
def test_star_cpu_fallback_keeps_results_on_flagos_and_does_not_recurse(tmp_path):
    conf = tmp_path / "star.conf"
    conf.write_text("* = cpu_fallback\n")
    p = run_python(STAR, {"FLAGOS_BACKEND_CONFIG": str(conf)}, timeout=600)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stderr[-3000:]


@pytest.mark.anyplatform
def test_a_rule_routing_the_fallbacks_own_copy_fails_at_import(tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_text("# routes\n_to_cpu = cpu_fallback\n")
    p = run_python("import torch_fl", {"FLAGOS_BACKEND_CONFIG": str(conf)})
    assert p.returncode != 0
    assert f"{conf}:2: aten::_to_cpu cannot be routed to 'cpu_fallback'" in p.stderr, p.stderr[-2000:]


@pytest.mark.anyplatform
def test_a_non_utf8_routing_file_fails_at_import_with_its_name(tmp_path):
    conf = tmp_path / "latin1.conf"
    conf.write_bytes(b"# caf\xe9\nmm = cpu\n")
    p = run_python("import torch_fl", {"FLAGOS_BACKEND_CONFIG": str(conf)})
    assert p.returncode != 0 and "UnicodeDecodeError" not in p.stderr
    assert f"{conf}:1: not UTF-8: byte 0xe9 at byte offset 5" in p.stderr, p.stderr[-2000:]
