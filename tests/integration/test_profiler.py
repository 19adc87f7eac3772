"""flagos in PyTorch's profiler: the PrivateUse1 profiler stubs (device time per operator) and each routed
call's backend in the trace (csrc/runtime/profiler_stubs.cpp, csrc/route/profiling.h)."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from torch.profiler import ProfilerActivity

import torch_fl
from tests.conftest import ON_CUDA

# The native route's label in the trace: the backing device's name.
NATIVE_LABEL = torch_fl.backing()


def model_and_input():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)).to("flagos")
    return model, torch.randn(128, 64, device="flagos")


def step(model, x):
    model(x).square().mean().backward()


def profiled(kind: str, fn):
    """Runs fn under the profiler `kind` with every warning an error; the profiler."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # PyTorch's own notice of torch.profiler (2.11 prints it for every device), not about flagos
        warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
        if kind == "autograd":
            prof = torch.autograd.profiler.profile(use_device="flagos")
        else:
            prof = torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1])
        with prof:
            fn()
    return prof


def events_of(prof):
    return prof.events() if hasattr(prof, "events") else prof.function_events


@pytest.mark.anyplatform
@pytest.mark.parametrize("kind", ["autograd", "torch.profiler"])
def test_profiler_runs_without_warnings_or_asserts(kind, capfd):
    model, x = model_and_input()
    step(model, x)
    capfd.readouterr()
    prof = profiled(kind, lambda: step(model, x))
    err = capfd.readouterr().err
    # PyTorch reports a failing profiler callback (an unregistered PrivateUse1 stub, an internal assert) on
    # stderr, not as an exception.
    for bad in ("PrivateUse1 used in profiler but not enabled", "INTERNAL ASSERT", "Exception in RecordFunction"):
        assert bad not in err
    events = events_of(prof)
    assert any(e.name == "aten::addmm" for e in events)
    for e in events:
        assert e.time_range.end >= e.time_range.start, f"{e.name} ends before it starts"
    table = prof.key_averages().table(row_limit=-1)
    assert "aten::addmm" in table


@pytest.mark.anyplatform
@pytest.mark.parametrize("kind", ["autograd", "torch.profiler"])
def test_each_routed_call_names_its_backend(kind):
    model, x = model_and_input()
    prof = profiled(kind, lambda: step(model, x))
    names = {e.name for e in events_of(prof)}
    # forward (typed native route) and backward (on the autograd device thread)
    assert f"flagos::addmm -> {NATIVE_LABEL}" in names
    assert f"flagos::mm -> {NATIVE_LABEL}" in names
    # nested in the dispatcher's scope of the same operator
    addmm = [e for e in events_of(prof) if e.name == "aten::addmm"]
    assert any(c.name == f"flagos::addmm -> {NATIVE_LABEL}" for e in addmm for c in e.cpu_children)


@pytest.mark.anyplatform
def test_a_cpu_fallback_call_names_cpu_fallback():
    a = torch.randn(8, 8, device="flagos")
    with torch_fl.routing.route({"sub.Tensor": "cpu_fallback"}):
        prof = profiled("torch.profiler", lambda: a - a)
    assert "flagos::sub.Tensor -> cpu_fallback" in {e.name for e in events_of(prof)}


@pytest.mark.anyplatform
def test_device_time_per_operator_with_use_device_flagos():
    # Host memory: the host clock between the operator's start and end; CUDA: timed events on its stream.
    a = torch.randn(256, 256, device="flagos")
    torch.mm(a, a)
    prof = profiled("autograd", lambda: [torch.mm(a, a) for _ in range(3)])
    mm = [e for e in prof.key_averages() if e.key == "aten::mm"]
    assert mm and mm[0].device_time_total > 0
    assert mm[0].count == 3


@pytest.mark.anyplatform
@pytest.mark.parametrize("kind", ["autograd", "torch.profiler"])
def test_export_chrome_trace(kind, tmp_path):
    model, x = model_and_input()
    prof = profiled(kind, lambda: step(model, x))
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "aten::addmm" in names
    assert f"flagos::addmm -> {NATIVE_LABEL}" in names


@pytest.mark.cuda
def test_device_time_is_the_kernels_time_on_cuda():
    # A large matmul: its device time (CUDA events on the current stream) is most of the wall time it
    # takes once synchronized, and far more than the time to launch it.
    assert ON_CUDA
    a = torch.randn(4096, 4096, device="flagos")
    torch.mm(a, a)
    torch.flagos.synchronize()
    prof = profiled("autograd", lambda: [torch.mm(a, a) for _ in range(5)])
    mm = [e for e in prof.key_averages() if e.key == "aten::mm"][0]
    assert mm.count == 5
    assert mm.device_time_total > 0
    events = [e for e in events_of(prof) if e.name == "aten::mm"]
    assert all(e.device_time_total > 0 for e in events)


@pytest.mark.cuda
def test_torch_profiler_privateuse1_on_cuda_without_warnings(capfd):
    assert ON_CUDA
    model, x = model_and_input()
    step(model, x)
    capfd.readouterr()
    prof = profiled("torch.profiler", lambda: step(model, x))
    err = capfd.readouterr().err
    assert "PrivateUse1 used in profiler but not enabled" not in err and "INTERNAL ASSERT" not in err
    assert f"flagos::addmm -> {NATIVE_LABEL}" in {e.name for e in events_of(prof)}
