"""The future of a flagos collective's Work: it completes with the caller's flagos tensors when the engine's
future (gloo's or NCCL's, holding the native aliases) completes, and with the engine's error."""

from __future__ import annotations

import pytest
import torch

import torch_fl
from torch_fl.distributed.work import _mapped

pytestmark = pytest.mark.anyplatform


def test_completes_with_the_callers_flagos_tensors_when_the_engine_does():
    t = torch.arange(4.0, device="flagos")
    inner = torch.futures.Future()
    future = _mapped(inner, [t])
    assert not future.done()
    inner.set_result([torch_fl.as_native(t)])
    [got] = future.wait()
    assert got.device == t.device and got.data_ptr() == t.data_ptr() and torch.equal(got.cpu(), t.cpu())
    # consumers chain on it as on gloo's and NCCL's futures
    assert future.then(lambda f: f.value()[0].sum().item()).wait() == 6.0


def test_an_engine_that_completed_already_completes_it_at_once():
    t = torch.ones(2, device="flagos")
    inner = torch.futures.Future()
    inner.set_result([torch_fl.as_native(t)])
    future = _mapped(inner, [t])
    assert future.done() and future.value()[0].device.type == "flagos"


def test_carries_the_engine_s_error():
    def fail(_):
        raise RuntimeError("gloo: connection reset by peer")

    source = torch.futures.Future()
    inner = source.then(fail)  # a future in error as gloo and NCCL set theirs (set_exception only wraps a value)
    future = _mapped(inner, [torch.ones(2, device="flagos")])
    source.set_result(None)
    with pytest.raises(RuntimeError, match="connection reset by peer"):
        future.wait()


def test_cpu_tensors_alone_give_a_cpu_future():
    t = torch.ones(3)
    inner = torch.futures.Future()
    future = _mapped(inner, [t])
    inner.set_result([t])
    assert future.wait()[0] is t
