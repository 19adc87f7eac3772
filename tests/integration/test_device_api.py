"""torch.flagos: devices, streams, events, memory, and the registered device."""

from __future__ import annotations

import os

import pytest
import torch

import torch_fl
from tests.conftest import ON_CUDA

pytestmark = pytest.mark.anyplatform


def expected_count() -> int:
    if ON_CUDA:
        return torch.cuda.device_count()
    return int(os.environ.get("FLAGOS_HOST_DEVICES", "1"))


def test_device_is_registered_as_the_accelerator():
    assert torch.device("flagos:0").type == "flagos"
    assert torch.accelerator.current_accelerator().type == "flagos"
    assert torch.accelerator.device_count() == expected_count()
    assert torch.flagos.is_available()
    assert torch.flagos.device_count() == expected_count()


def test_generated_methods():
    t = torch.ones(2)
    f = t.flagos()
    assert f.is_flagos and f.device == torch.device("flagos", 0)
    m = torch.nn.Linear(2, 2).flagos()
    assert m.weight.device.type == "flagos"
    assert torch.UntypedStorage(4).flagos().device.type == "flagos"


def test_current_device_and_context():
    n = torch.flagos.device_count()
    assert torch.flagos.current_device() == 0
    with torch.flagos.device(n - 1):
        assert torch.flagos.current_device() == n - 1
        assert torch.empty(1, device="flagos").device.index == n - 1
    assert torch.flagos.current_device() == 0
    torch.flagos.set_device(n - 1)
    try:
        assert torch.flagos.current_device() == n - 1
    finally:
        torch.flagos.set_device(0)


def test_out_of_range_index_is_a_clear_error():
    n = torch.flagos.device_count()
    # CUDA's error for an invalid ordinal, from the core's check as from torch.flagos.
    with pytest.raises(torch.AcceleratorError, match=rf"flagos device index {n} is out of range.*{n} flagos device"):
        torch.empty(1, device=f"flagos:{n}")
    with pytest.raises(torch.AcceleratorError, match=rf"flagos device index {n} is out of range.*{n} flagos device"):
        torch.flagos.set_device(n)
    with pytest.raises(ValueError, match="expected a flagos device"):
        torch.flagos.memory_allocated("cpu")


def test_device_properties():
    props = torch.flagos.get_device_properties(0)
    assert props.total_memory > 0
    assert torch.flagos.get_device_name(0) == props.name and props.name
    free, total = torch.flagos.mem_get_info(0)
    assert 0 < free <= total
    if ON_CUDA:
        assert props.name == torch.cuda.get_device_properties(0).name


def test_amp_queries():
    assert torch.flagos.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.flagos.is_bf16_supported() in (True, False)
    assert torch.amp.is_autocast_available("flagos")


def test_streams_and_events():
    s = torch.flagos.Stream()
    assert isinstance(s, torch.flagos.Stream) and s.device.type == "flagos"
    default = torch.flagos.default_stream()
    assert default.stream_id == 0
    with torch.flagos.stream(s):
        assert torch.flagos.current_stream() == s
        x = torch.randn(64, 64, device="flagos")
        start = torch.flagos.Event(enable_timing=True)
        end = torch.flagos.Event(enable_timing=True)
        start.record()
        y = x @ x
        end.record()
    assert torch.flagos.current_stream() == default
    default.wait_stream(s)
    end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) >= 0.0
    torch.flagos.synchronize()
    y.record_stream(s)  # accepted for flagos streams
    assert isinstance(start, torch.flagos.Event) and not isinstance(start, torch.flagos.Stream)


def test_memory_statistics_follow_allocations():
    torch.flagos.synchronize()
    torch.flagos.reset_peak_memory_stats()
    before = torch.flagos.memory_allocated()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="flagos")
    assert torch.flagos.memory_allocated() >= before + (1 << 20)
    assert torch.flagos.max_memory_allocated() >= before + (1 << 20)
    stats = torch.flagos.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current"):
        assert key in stats
    del x
    assert torch.flagos.memory_allocated() == before
    assert torch.flagos.max_memory_allocated() >= before + (1 << 20)
    torch.flagos.reset_peak_memory_stats()
    assert torch.flagos.max_memory_allocated() == torch.flagos.memory_allocated()
    torch.flagos.empty_cache()


def test_kernel_results_count_as_flagos_memory():
    before = torch.flagos.memory_allocated()
    a = torch.ones(1 << 18, device="flagos")
    b = a * 2  # allocated by the backing kernel, taken over by flagos
    assert torch.flagos.memory_allocated() >= before + 2 * a.nbytes
    del a, b
    assert torch.flagos.memory_allocated() == before


def test_backing_name():
    assert torch_fl.backing() == ("cuda" if ON_CUDA else "cpu")


def test_a_negative_index_changes_no_device_as_on_cuda():
    torch.flagos.set_device(0)
    torch.flagos.set_device(-1)  # torch.cuda.set_device(-1) does nothing
    assert torch.flagos.current_device() == 0
    with torch.flagos.device(-1):
        assert torch.flagos.current_device() == 0
    assert torch.flagos.current_device() == 0
    # A context left without being entered, and torch.accelerator's exchange with "no device", change nothing
    # (torch.cuda.device(i).__exit__ restores its previous index, -1: no device)
    torch.flagos.device(expected_count() - 1).__exit__(None, None, None)
    assert torch.flagos.current_device() == 0
    assert torch._C._accelerator_maybeExchangeDevice(-1) == 0
    assert torch.flagos.current_device() == 0
