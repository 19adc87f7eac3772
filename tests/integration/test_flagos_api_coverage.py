"""torch.flagos covers torch.cuda: every public name is implemented or listed with a reason, the generated
docs/torch-flagos-api.md is current, and the names torch.flagos adds behave as torch.cuda's do."""

from __future__ import annotations

import inspect
import pathlib
import re
import subprocess
import sys

import pytest
import torch

from tests.conftest import ON_CUDA
from tests.unit.routing_fixtures import routing_state  # noqa: F401
from torch_fl.flagos import _coverage

pytestmark = pytest.mark.anyplatform

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "torch-flagos-api.md"
flagos = torch.flagos


# ---------------------------------------------------------------- coverage and the generated doc


def test_every_torch_cuda_name_is_implemented_or_has_a_reason():
    unclassified = _coverage.missing()
    assert not unclassified, (
        f"torch {torch.__version__}'s torch.cuda has names torch.flagos neither implements nor lists in "
        f"torch_fl/flagos/_coverage.py: {unclassified}; implement them or add a reason, then run "
        "python scripts/gen_flagos_api.py"
    )
    assert not _coverage.contradictions()


def test_public_names_exclude_only_imports():
    names = _coverage.cuda_public_names()
    assert set(torch.cuda.__all__) <= set(names)
    assert {"OutOfMemoryError", "AcceleratorError", "memory_summary", "StreamContext"} <= set(names)
    assert {"os", "Any", "lru_cache"}.isdisjoint(names)


def test_all_lists_the_public_names_and_each_exists():
    assert flagos.__all__ == sorted(flagos.__all__)
    for name in flagos.__all__:
        assert hasattr(flagos, name), name


def _params(fn) -> dict:
    # torch.cuda's RNG functions default to device 'cuda' where flagos's default to 'flagos'.
    return {
        p.name: (p.kind, "flagos" if p.default == "cuda" else p.default)
        for p in inspect.signature(fn).parameters.values()
    }


def test_functions_take_torch_cudas_parameters():
    shared = [
        n for n in _coverage.cuda_public_names() if hasattr(flagos, n) and inspect.isfunction(getattr(torch.cuda, n))
    ]
    assert len(shared) > 50
    for name in shared:
        ours, theirs = _params(getattr(flagos, name)), _params(getattr(torch.cuda, name))
        # Every call torch.cuda's accepts, flagos's accepts (a newer torch may add an optional parameter).
        assert {k: ours.get(k) for k in theirs} == theirs, name
        assert all(ours[k][1] is not inspect.Parameter.empty for k in ours.keys() - theirs.keys()), name


def test_generated_doc_is_current(tmp_path):
    first = DOC.read_text().splitlines()[2]
    made_for = re.search(r"torch (\d+\.\d+)'s live modules", first).group(1)
    if made_for != ".".join(torch.__version__.split(".")[:2]):
        pytest.skip(f"docs/torch-flagos-api.md lists torch {made_for}'s names; this is torch {torch.__version__}")
    out = tmp_path / "api.md"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_flagos_api.py"), "--output", str(out)], check=True)
    assert out.read_text() == DOC.read_text(), "docs/torch-flagos-api.md is stale: run python scripts/gen_flagos_api.py"


def test_doc_lists_every_name_with_its_status():
    text = DOC.read_text()
    for name in _coverage.cuda_public_names():
        assert f"`{name}`" in text, name
    assert "| `CUDAGraph` | a torch.cuda.CUDAGraph capturing flagos work" in text
    assert "| `MemPool` | user memory pools (torch.cuda.MemPool) are not wrapped yet" in text
    assert "| `current_blas_handle` | raw cuBLAS handle" in text


# ---------------------------------------------------------------- device arguments and errors


def test_errors_are_torchs_classes():
    assert flagos.OutOfMemoryError is torch.OutOfMemoryError is torch.cuda.OutOfMemoryError
    assert flagos.AcceleratorError is torch.AcceleratorError


DEVICE_FUNCTIONS = [
    "memory_summary",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_allocated",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "mem_get_info",
    "get_device_properties",
    "get_device_capability",
    "get_per_process_memory_fraction",
    "device_memory_used",
    "synchronize",
    "set_device",
    "current_stream",
    "default_stream",
]


@pytest.mark.parametrize("name", DEVICE_FUNCTIONS)
def test_device_arguments(name):
    fn = getattr(flagos, name)
    n = flagos.device_count()
    for good in (0, "flagos:0", torch.device("flagos", 0), None):
        fn(good)
    where = r"FLAGOS_HOST_DEVICES" if not ON_CUDA else r"one per CUDA device"
    for bad in (n, f"flagos:{n}", torch.device("flagos", n)):
        with pytest.raises(
            torch.AcceleratorError, match=rf"flagos device index {n} is out of range.*{n} flagos.*{where}"
        ):
            fn(bad)
    with pytest.raises(ValueError, match="expected a flagos device"):
        fn("cpu")
    with pytest.raises(TypeError, match="expected a flagos device"):
        fn(1.5)


def test_invalid_index_in_peer_and_raw_allocation():
    n = flagos.device_count()
    with pytest.raises(torch.AcceleratorError, match="out of range"):
        flagos.can_device_access_peer(0, n)
    with pytest.raises(torch.AcceleratorError, match="out of range"):
        flagos.caching_allocator_alloc(8, n)
    with pytest.raises(torch.AcceleratorError, match="out of range"):
        flagos.device(n)


def test_core_rejects_an_invalid_index_as_cuda_does():
    with pytest.raises(torch.AcceleratorError, match="out of range"):
        torch.accelerator.set_device_index(flagos.device_count())


def test_an_allocation_too_large_raises_out_of_memory():
    # Counted as the backing device's allocator counts it: the host allocator's once; CUDA's as CUDA does.
    counted = 1
    if ON_CUDA:
        before = torch.cuda.memory_stats(0)["num_ooms"]
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(1 << 60, dtype=torch.uint8, device="cuda:0")
        counted = torch.cuda.memory_stats(0)["num_ooms"] - before
    before = flagos.memory_stats()["num_ooms"]
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(1 << 60, dtype=torch.uint8, device="flagos")
    assert torch.flagos.OutOfMemoryError is torch.OutOfMemoryError
    assert flagos.memory_stats()["num_ooms"] == before + counted
    flagos.reset_accumulated_memory_stats()
    assert flagos.memory_stats()["num_ooms"] == 0


# More than a 64-bit address space maps: every allocator refuses it at once, without touching memory.
BIG = 1 << 60


def _one(i):
    return torch.ones(1, dtype=torch.uint8, device=i)


# Allocations of flagos operations other than flagos's own empty/empty_strided/resize_: on host backing the
# native route's CPU kernels allocate their results (and out= resizes) with the CPU's allocator, whose refusal
# was a plain RuntimeError, uncounted. `d`: the device to run on.
ALLOCATING = {
    "ones": lambda d: torch.ones(BIG, dtype=torch.uint8, device=d),
    "zeros": lambda d: torch.zeros(BIG, dtype=torch.uint8, device=d),
    "full": lambda d: torch.full((BIG,), 7, dtype=torch.uint8, device=d),
    "arange": lambda d: torch.arange(BIG, dtype=torch.uint8, device=d),
    "new_empty": lambda d: _one(d).new_empty(BIG),
    "contiguous": lambda d: _one(d).expand(BIG).contiguous(),
    "an op's result": lambda d: _one(d).expand(BIG) + 1,
    "an out= resized": lambda d: torch.mul(_one(d).expand(BIG), 2, out=torch.empty(0, dtype=torch.uint8, device=d)),
    "a dtype conversion": lambda d: _one(d).expand(BIG).float(),
    "empty": lambda d: torch.empty(BIG, dtype=torch.uint8, device=d),
    "resize_": lambda d: torch.empty(0, dtype=torch.uint8, device=d).resize_(BIG),
}


def _ooms(index: int) -> int:
    return flagos.memory_stats(index)["num_ooms"]


@pytest.mark.parametrize("way", ALLOCATING.values(), ids=ALLOCATING.keys())
def test_every_allocation_failure_is_out_of_memory_counted_on_its_device(way):
    last = flagos.device_count() - 1
    counted = 1
    if ON_CUDA:  # flagos:i's statistics are cuda:i's: the same call there counts as flagos's must
        before = _ooms(last)
        with pytest.raises(torch.OutOfMemoryError):
            way(f"cuda:{last}")
        counted = _ooms(last) - before
    before = _ooms(last)
    with pytest.raises(torch.OutOfMemoryError, match="out of memory" if ON_CUDA else f"out of memory .*flagos:{last}"):
        way(f"flagos:{last}")
    assert _ooms(last) == before + counted


@pytest.mark.skipif(ON_CUDA, reason="the CPU fallback's host memory is not a CUDA backing's device memory")
@pytest.mark.usefixtures("routing_state")
def test_an_allocation_failure_on_the_cpu_fallback_route_is_flagos_s_on_host_backing():
    from torch_fl import routing

    before = _ooms(0)
    with routing.route({"add.Tensor": "cpu_fallback"}):
        with pytest.raises(torch.OutOfMemoryError, match=r"out of memory on flagos:0 \(host memory\) in aten::add"):
            _one("flagos:0").expand(BIG) + 1
    assert _ooms(0) == before + 1


def test_a_copy_to_the_host_that_fails_is_the_host_s_error():
    # x.cpu() allocates host memory, not flagos memory: a plain RuntimeError, uncounted, as from a CUDA tensor
    before = _ooms(0)
    with pytest.raises(RuntimeError, match="DefaultCPUAllocator") as e:
        _one("flagos:0").expand(BIG).cpu()
    assert not isinstance(e.value, torch.OutOfMemoryError) and _ooms(0) == before


# ---------------------------------------------------------------- memory


def test_memory_summary_names_flagos_and_the_allocated_bytes():
    x = torch.empty(64 << 20, dtype=torch.uint8, device="flagos")
    allocated = flagos.memory_allocated()
    assert 768 << 10 <= allocated < 768 << 20  # shown in KiB, as torch.cuda's table does
    summary = flagos.memory_summary()
    assert isinstance(summary, str) and "flagos" in summary
    row = next(line for line in summary.splitlines() if line.startswith("| Allocated memory"))
    assert row.split("|")[2].strip() == f"{allocated // 1024} KiB"
    assert flagos.memory_summary(abbreviated=True).count("Allocated memory") == 1
    del x


def test_nested_memory_stats_are_the_flat_ones_nested():
    x = torch.ones(1000, device="flagos")
    flat, nested = flagos.memory_stats(), flagos.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == flat["allocated_bytes.all.current"] > 0
    assert nested["allocation"]["all"]["allocated"] == flat["allocation.all.allocated"]
    del x


def test_reset_accumulated_memory_stats_zeroes_totals_and_keeps_current():
    keep = torch.ones(1000, device="flagos")
    flagos.synchronize()
    flagos.reset_accumulated_memory_stats()
    stats = flagos.memory_stats()
    assert stats["allocation.all.allocated"] == 0 and stats["allocation.all.freed"] == 0
    assert stats["allocation.all.current"] >= 1 and stats["allocated_bytes.all.current"] >= keep.nbytes
    x = torch.empty(4096, dtype=torch.uint8, device="flagos")
    del x
    stats = flagos.memory_stats()
    assert stats["allocation.all.allocated"] == 1 and stats["allocation.all.freed"] == 1
    del keep


def test_deprecated_peak_resets_reset_all_peaks_with_a_warning():
    for reset in (flagos.reset_max_memory_allocated, flagos.reset_max_memory_cached):
        x = torch.empty(1 << 20, dtype=torch.uint8, device="flagos")
        del x
        assert flagos.max_memory_allocated() >= flagos.memory_allocated() + (1 << 20)
        with pytest.warns(FutureWarning, match="reset_peak_memory_stats"):
            reset()
        assert flagos.max_memory_allocated() == flagos.memory_allocated()
        assert flagos.max_memory_reserved() == flagos.memory_reserved()


def test_cached_aliases_are_reserved_with_a_warning():
    x = torch.empty(1 << 20, dtype=torch.uint8, device="flagos")
    with pytest.warns(FutureWarning, match="memory_reserved"):
        assert flagos.memory_cached() == flagos.memory_reserved() >= 1 << 20
    with pytest.warns(FutureWarning, match="max_memory_reserved"):
        assert flagos.max_memory_cached() == flagos.max_memory_reserved() >= 1 << 20
    del x


def test_caching_allocator_alloc_and_delete():
    flagos.synchronize()
    before = flagos.memory_allocated()
    ptr = flagos.caching_allocator_alloc(1 << 20, stream=flagos.current_stream())
    assert ptr != 0 and flagos.memory_allocated() >= before + (1 << 20)
    flagos.caching_allocator_delete(ptr)
    assert flagos.memory_allocated() == before
    assert flagos.caching_allocator_alloc(0) == 0
    flagos.caching_allocator_delete(0)
    with pytest.raises(TypeError, match="stream"):
        flagos.caching_allocator_alloc(8, stream="default")
    if not ON_CUDA:
        with pytest.raises(RuntimeError, match="invalid device pointer"):
            flagos.caching_allocator_delete(ptr)


def test_caching_allocator_switches():
    flagos.caching_allocator_enable(True)
    if ON_CUDA and not hasattr(torch.cuda, "caching_allocator_disabled"):
        with pytest.raises(RuntimeError, match=f"torch {re.escape(torch.__version__)} lacks"):
            with flagos.caching_allocator_disabled():
                pass
    else:
        with flagos.caching_allocator_disabled():
            x = torch.ones(16, device="flagos")
            assert x.sum().item() == 16
    assert flagos.get_allocator_backend() == (torch.cuda.get_allocator_backend() if ON_CUDA else "host")


def test_per_process_memory_fraction():
    with pytest.raises(TypeError, match="fraction"):
        flagos.set_per_process_memory_fraction(1)
    with pytest.raises(ValueError, match="fraction"):
        flagos.set_per_process_memory_fraction(1.5)
    if ON_CUDA:
        flagos.set_per_process_memory_fraction(0.5)
        try:
            assert flagos.get_per_process_memory_fraction() == 0.5
        finally:
            flagos.set_per_process_memory_fraction(1.0)
    else:
        assert flagos.get_per_process_memory_fraction() == 1.0
        with pytest.raises(RuntimeError, match="needs a CUDA backing.*no per-process cap"):
            flagos.set_per_process_memory_fraction(0.5)


def test_memory_snapshot():
    if not ON_CUDA:
        with pytest.raises(RuntimeError, match="needs a CUDA backing.*memory_stats"):
            flagos.memory_snapshot()
        return
    x = torch.empty(1 << 20, dtype=torch.uint8, device="flagos")
    segments = flagos.memory_snapshot()
    assert any(s["address"] <= x.data_ptr() < s["address"] + s["total_size"] for s in segments)


def test_pinned_host_memory_stats():
    if not ON_CUDA:
        for name in ("host_memory_stats", "host_memory_stats_as_nested_dict", "reset_peak_host_memory_stats"):
            with pytest.raises(RuntimeError, match="needs a CUDA backing.*pinned"):
                getattr(flagos, name)()
        return
    if not hasattr(torch.cuda, "host_memory_stats"):
        pytest.skip(f"torch {torch.__version__} has no torch.cuda.host_memory_stats")
    assert flagos.host_memory_stats().keys() == torch.cuda.host_memory_stats().keys()


def test_device_memory_used_and_monitoring():
    if ON_CUDA:
        pytest.importorskip("pynvml", reason="torch.cuda reads NVML through pynvml")
        assert 0 < flagos.device_memory_used() <= flagos.get_device_properties().total_memory
        assert 0 <= flagos.utilization() <= 100 and 0 <= flagos.memory_usage() <= 100
        assert flagos.temperature() > 0 and flagos.clock_rate() > 0 and flagos.power_draw() > 0
        assert isinstance(flagos.list_gpu_processes(), str)
        return
    used = flagos.device_memory_used()
    assert 0 < used <= flagos.get_device_properties().total_memory
    for name in ("utilization", "memory_usage", "temperature", "power_draw", "clock_rate", "list_gpu_processes"):
        with pytest.raises(RuntimeError, match="needs a CUDA backing.*driver counters"):
            getattr(flagos, name)()


# ---------------------------------------------------------------- streams


def test_stream_context_switches_the_current_stream():
    s = flagos.Stream()
    ctx = flagos.StreamContext(s)
    assert flagos.current_stream() != s
    with ctx:
        assert flagos.current_stream() == s
    assert flagos.current_stream() == flagos.default_stream()
    assert isinstance(flagos.stream(s), flagos.StreamContext)
    with flagos.StreamContext(None):
        assert flagos.current_stream() == flagos.default_stream()
    with pytest.raises(ValueError, match="expected a flagos stream"):
        flagos.StreamContext(torch.Stream(device="cpu"))


def test_stream_context_on_another_device_restores_both_devices():
    n = flagos.device_count()
    if n < 2:
        pytest.skip("needs two flagos devices (FLAGOS_HOST_DEVICES=2 on host backing)")
    other = flagos.Stream(device=1)
    with flagos.stream(other):
        assert flagos.current_device() == 1  # as torch.cuda.set_stream: the stream's device becomes current
        assert flagos.current_stream(1) == other
    assert flagos.current_device() == 0
    assert flagos.current_stream(1) == flagos.default_stream(1)
    assert flagos.current_stream(0) == flagos.default_stream(0)


def test_external_streams():
    if not ON_CUDA:
        with pytest.raises(RuntimeError, match="needs a CUDA backing"):
            flagos.ExternalStream(1234)
        with pytest.raises(RuntimeError, match="needs a CUDA backing"):
            flagos.get_stream_from_external(1234)
        return
    from torch_fl.flagos._streams import native_stream

    made = torch.cuda.Stream()
    s = flagos.ExternalStream(made.cuda_stream)
    assert isinstance(s, flagos.Stream) and s.device.type == "flagos"
    assert native_stream(s).cuda_stream == made.cuda_stream
    with flagos.stream(s):
        assert torch.cuda.current_stream().cuda_stream == made.cuda_stream


def test_capture_queries_and_external_events():
    assert flagos.is_current_stream_capturing() is False
    with pytest.raises(NotImplementedError, match="torch.Event objects, which have no external flag"):
        flagos.Event(external=True)


# ---------------------------------------------------------------- device queries


def test_architecture_and_dtype_queries():
    if ON_CUDA:
        assert flagos.get_arch_list() == torch.cuda.get_arch_list()
        assert flagos.get_gencode_flags() == torch.cuda.get_gencode_flags()
        assert flagos.get_device_capability() == torch.cuda.get_device_capability(0)
        assert flagos.has_magma == torch.cuda.has_magma
    else:
        assert flagos.get_arch_list() == [] and flagos.get_gencode_flags() == ""
        assert flagos.get_device_capability() == (0, 0)
        assert flagos.is_tf32_supported() is False and flagos.has_magma is False
    assert flagos.has_half is True


def test_peer_access_and_ipc_collect():
    n = flagos.device_count()
    expected = torch.cuda.can_device_access_peer(0, n - 1) if ON_CUDA else True
    assert flagos.can_device_access_peer(0, n - 1) == expected
    flagos.ipc_collect()


def test_sync_debug_mode():
    assert flagos.get_sync_debug_mode() == 0
    try:
        flagos.set_sync_debug_mode("warn")
        assert flagos.get_sync_debug_mode() == 1
        flagos.set_sync_debug_mode(0)
        assert flagos.get_sync_debug_mode() == 0
        with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
            flagos.set_sync_debug_mode("loud")
    finally:
        flagos.set_sync_debug_mode("default")


def test_device_type_alias():
    assert flagos.Device == torch.cuda.Device
