"""torch.accelerator, all of it, on flagos: each public name of the installed torch answers as it does for
CUDA (on a CUDA backing: with CUDA's own figures for flagos's memory), and none is left unlisted in
torch_fl/flagos/_coverage.py (docs/torch-flagos-api.md renders that table)."""

from __future__ import annotations

import pytest
import torch

import torch_fl
from torch_fl.flagos import _coverage as coverage

pytestmark = pytest.mark.anyplatform
acc = torch.accelerator
ON_CUDA = torch_fl.backing() == "cuda"
CHECKED: set[str] = set()


def checks(*names):
    CHECKED.update(names)
    return lambda fn: fn


def test_every_name_is_listed_and_checked():
    names = coverage.accelerator_public_names()
    assert sorted(set(names) - set(coverage.ACCELERATOR)) == [], "add them to _coverage.ACCELERATOR"
    assert sorted(set(names) - CHECKED) == [], "add a check to this file"


@checks("current_accelerator", "is_available", "device_count")
def test_the_accelerator_is_flagos():
    assert acc.current_accelerator() == torch.device("flagos")
    assert acc.is_available()
    assert acc.device_count() == torch.flagos.device_count() >= 1


@checks("current_device_index", "current_device_idx", "set_device_index", "set_device_idx", "device_index")
def test_current_device():
    last = acc.device_count() - 1
    before = acc.current_device_index()
    with acc.device_index(last):
        assert acc.current_device_index() == torch.flagos.current_device() == last
        with acc.device_index(None):
            assert acc.current_device_index() == last
    assert acc.current_device_index() == before
    acc.set_device_index(last)
    try:
        assert torch.flagos.current_device() == last
        if hasattr(acc, "current_device_idx"):
            with pytest.warns(FutureWarning):
                assert acc.current_device_idx() == last
    finally:
        acc.set_device_index(before)
    if hasattr(acc, "set_device_idx"):
        with pytest.warns(FutureWarning):
            acc.set_device_idx(before)
    with pytest.raises(torch.AcceleratorError):
        acc.set_device_index(acc.device_count())


@checks("get_device_capability")
def test_capability_lists_every_type_models_use():
    supported = acc.get_device_capability(0)["supported_dtypes"]
    assert {torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool} <= set(supported)
    assert acc.get_device_capability("flagos:0") == acc.get_device_capability(0)


@checks("current_stream", "set_stream", "synchronize")
def test_streams():
    default = acc.current_stream(0)
    assert default.device == torch.device("flagos", 0)
    side = torch.Stream("flagos:0")
    acc.set_stream(side)
    try:
        assert acc.current_stream(0) == side == torch.flagos.current_stream(0)
        x = torch.ones(64, device="flagos:0") * 2
        acc.synchronize(0)
        assert side.query()
    finally:
        acc.set_stream(default)
    assert x.sum().item() == 128


def _figures(index: int) -> dict:
    return {
        "allocated": acc.memory_allocated(index),
        "max_allocated": acc.max_memory_allocated(index),
        "reserved": acc.memory_reserved(index),
        "max_reserved": acc.max_memory_reserved(index),
    }


@checks(
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "memory_stats",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "empty_cache",
)
def test_memory_figures_follow_flagos_tensors():
    index = acc.device_count() - 1
    acc.synchronize(index)
    acc.empty_cache()
    acc.reset_peak_memory_stats(index)
    acc.reset_accumulated_memory_stats(index)
    base = _figures(index)
    x = torch.empty(1 << 20, dtype=torch.uint8, device=f"flagos:{index}")
    held = _figures(index)
    assert held["allocated"] - base["allocated"] >= 1 << 20
    assert held["max_allocated"] >= held["allocated"] and held["reserved"] >= held["allocated"]
    stats = acc.memory_stats(index)
    assert stats["allocated_bytes.all.current"] == held["allocated"]
    assert stats["allocated_bytes.all.allocated"] >= 1 << 20 and stats["num_ooms"] == 0
    # One statistic, three ways to ask: torch.accelerator, torch.flagos and (on a GPU) torch.cuda.
    assert torch.flagos.memory_allocated(index) == held["allocated"]
    assert torch.flagos.memory_stats(index)["allocated_bytes.all.current"] == held["allocated"]
    if ON_CUDA:
        assert torch.cuda.memory_allocated(index) == held["allocated"]
        assert set(torch.cuda.memory_stats(index)) == set(stats)
    del x
    after = _figures(index)
    assert after["allocated"] == base["allocated"] and after["max_allocated"] == held["max_allocated"]
    acc.reset_peak_memory_stats(index)
    assert acc.max_memory_allocated(index) == after["allocated"]
    acc.reset_accumulated_memory_stats(index)
    assert acc.memory_stats(index)["allocated_bytes.all.freed"] == 0
    acc.empty_cache()
    if ON_CUDA:
        assert acc.memory_reserved(index) == torch.cuda.memory_reserved(index)
    else:
        assert acc.memory_reserved(index) == acc.memory_allocated(index)


@checks("get_memory_info", "empty_host_cache")
def test_memory_info_and_host_cache():
    free, total = acc.get_memory_info(0)
    assert 0 < free <= total
    if ON_CUDA:
        assert total == torch.cuda.mem_get_info(0)[1]
    assert (free, total)[1] == torch.flagos.mem_get_info(0)[1]
    pinned = torch.ones(8).pin_memory() if ON_CUDA else None
    del pinned
    acc.empty_host_cache()


@checks("Graph")
def test_graph():
    if not hasattr(acc, "Graph"):
        pytest.skip(f"torch {torch.__version__} has no torch.accelerator.Graph")
    if not ON_CUDA:
        with pytest.raises(RuntimeError, match="CUDA backing"):
            acc.Graph()
        return
    x = torch.ones(16, device="flagos")
    graph = acc.Graph()
    with torch.flagos.stream(torch.flagos.Stream()):
        graph.capture_begin()
        y = x * 3
        graph.capture_end()
    x.fill_(2)
    graph.replay()
    torch.flagos.synchronize()
    assert y.sum().item() == 96
