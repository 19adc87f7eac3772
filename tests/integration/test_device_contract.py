"""The device contract: device indices checked wherever a device reaches the core, a default generator per flagos
device, streams and events without an index on the current device (issue 27)."""

from __future__ import annotations

import copy
import pickle
import warnings

import pytest
import torch
from torch import nn

from tests.conftest import NATIVE, ON_CUDA
from tests.helpers import run_python

pytestmark = pytest.mark.anyplatform

WHERE = "FLAGOS_HOST_DEVICES" if not ON_CUDA else "one per CUDA device"


def out_of_range(index: int):
    n = torch.flagos.device_count()
    return pytest.raises(
        torch.AcceleratorError, match=rf"flagos device index {index} is out of range.*has {n} flagos.*{WHERE}"
    )


def in_device_context(d):
    with torch.device(d):
        return torch.ones(2)


def in_device_guard(d):
    with torch.accelerator.device_index(torch.device(d).index):
        return torch.ones(2, device="flagos")


# The ways a device index reaches the core: factories (routed whole or through empty), copies, modules,
# storages, the device guard, generators and streams.
WAYS = {
    "empty": lambda d: torch.empty(2, device=d),
    "empty_strided": lambda d: torch.empty_strided((2,), (1,), device=d),
    "ones": lambda d: torch.ones(2, device=d),
    "zeros": lambda d: torch.zeros(2, device=d),
    "full": lambda d: torch.full((2,), 3.0, device=d),
    "arange": lambda d: torch.arange(4, device=d),
    "randn": lambda d: torch.randn(2, device=d),
    "tensor": lambda d: torch.tensor([1.0, 2.0], device=d),
    "ones_like": lambda d: torch.ones_like(torch.ones(2), device=d),
    "to": lambda d: torch.ones(2, device="flagos").to(d),
    "to_from_cpu": lambda d: torch.ones(2).to(d),
    "module_to": lambda d: nn.Linear(2, 2).to(d),
    "storage": lambda d: torch.UntypedStorage(4, device=d),
    "device_context": in_device_context,
    "set_device_index": lambda d: torch.accelerator.set_device_index(torch.device(d).index),
    "device_guard": in_device_guard,
    "generator": lambda d: torch.Generator(device=d),
    "stream": lambda d: torch.Stream(device=d),
}


@pytest.mark.parametrize("way", sorted(WAYS))
def test_an_index_out_of_range_raises_accelerator_error_on_every_way_in(way):
    n = torch.flagos.device_count()
    # n: one past the last device; 64 and 127 lie past the core's host tables (kMaxDevices).
    for index in (n, 64, 127):
        with out_of_range(index):
            WAYS[way](f"flagos:{index}")
        assert torch.accelerator.current_device_index() == 0


def test_set_default_device_out_of_range():
    n = torch.flagos.device_count()
    torch.set_default_device(f"flagos:{n}")
    try:
        with out_of_range(n):
            torch.ones(2)
    finally:
        torch.set_default_device(None)


def test_an_invalid_index_is_cuda_s_invalid_device_error():
    with pytest.raises(torch.AcceleratorError) as info:
        torch.accelerator.set_device_index(torch.flagos.device_count())
    assert info.value.error_code == 101  # cudaErrorInvalidDevice, what CUDA raises for an invalid ordinal


# ---------------------------------------------------------------- streams and events without an index


def test_streams_and_events_without_an_index_are_on_the_current_device():
    last = torch.flagos.device_count() - 1
    with torch.flagos.device(last):
        for s in (torch.Stream(device="flagos"), torch.flagos.Stream(), torch.flagos.current_stream()):
            assert s.device == torch.device("flagos", last)
        assert torch.accelerator.current_stream().device == torch.device("flagos", last)
        e = torch.Event(device="flagos", enable_timing=True)
        e.record()
        e.synchronize()
        assert e.query() and e.device == torch.device("flagos", last)
        with torch.flagos.stream(torch.Stream(device="flagos")) as _:
            assert torch.flagos.current_stream().device_index == last


def test_an_event_of_one_device_is_not_recorded_on_another_device_s_stream():
    if torch.flagos.device_count() < 2:
        pytest.skip("needs two flagos devices")
    e = torch.flagos.Event()
    e.record(torch.flagos.current_stream(0))
    with pytest.raises(RuntimeError, match="Event device index 0 does not match recording stream's device index 1"):
        e.record(torch.flagos.current_stream(1))
    assert e.device == torch.device("flagos", 0)


def test_events_of_two_devices_are_not_timed_against_each_other():
    # CUDA refuses (invalid resource handle); host memory's events returned a number.
    if torch.flagos.device_count() < 2:
        pytest.skip("needs two flagos devices")
    a, b, c = (torch.flagos.Event(enable_timing=True) for _ in range(3))
    a.record(torch.flagos.Stream(device=0))
    b.record(torch.flagos.Stream(device=1))
    c.record(torch.flagos.Stream(device=0))
    torch.flagos.synchronize(0)
    torch.flagos.synchronize(1)
    assert a.elapsed_time(c) >= 0
    with pytest.raises(RuntimeError):
        a.elapsed_time(b)


@pytest.mark.parametrize(
    "call",
    [
        lambda i: torch.accelerator.synchronize(i),
        lambda i: torch.flagos.synchronize(i),
        lambda i: torch.accelerator.current_stream(i),
        lambda i: torch.accelerator.get_device_capability(i),
    ],
    ids=["accelerator.synchronize", "flagos.synchronize", "current_stream", "get_device_capability"],
)
def test_device_arguments_of_the_accelerator_api_are_checked(call):
    # -1 alone is the current device (as on CUDA); an index past the last device and -2 are out of range
    call(-1)
    n = torch.flagos.device_count()
    for index in (n, -2):
        with out_of_range(index):
            call(index)


# ---------------------------------------------------------------- generators


def test_generators_are_on_their_flagos_device():
    n = torch.flagos.device_count()
    assert [g.device for g in torch.flagos.default_generators] == [torch.device("flagos", i) for i in range(n)]
    assert torch.Generator(device=f"flagos:{n - 1}").device == torch.device("flagos", n - 1)
    with torch.flagos.device(n - 1):
        assert torch.Generator(device="flagos").device == torch.device("flagos", n - 1)


def test_a_flagos_generator_copies_with_its_state():
    g = torch.Generator(device="flagos").manual_seed(8)
    torch.randn(4, device="flagos", generator=g)
    for twin in (copy.deepcopy(g), pickle.loads(pickle.dumps(g)), g.clone_state()):
        assert twin.device == g.device and twin.initial_seed() == 8
        torch.testing.assert_close(
            torch.randn(4, device="flagos", generator=twin).cpu(),
            torch.randn(4, device="flagos", generator=g.clone_state()).cpu(),
            rtol=0,
            atol=0,
        )


def test_a_flagos_generator_draws_the_backing_generator_s_numbers():
    g = torch.Generator(device="flagos").manual_seed(5)
    native = torch.Generator(device=NATIVE).manual_seed(5)
    for draw in (
        lambda d, gen: torch.randn(16, device=d, generator=gen),
        lambda d, gen: torch.rand(16, device=d, generator=gen),
        lambda d, gen: torch.empty(16, device=d).normal_(generator=gen),
        lambda d, gen: torch.empty(16, device=d).bernoulli_(0.3, generator=gen),
        lambda d, gen: torch.randperm(20, device=d, generator=gen),
        lambda d, gen: torch.multinomial(torch.ones(8, device=d), 4, generator=gen),
    ):
        torch.testing.assert_close(draw("flagos", g).cpu(), draw(NATIVE, native).cpu(), rtol=0, atol=0)


def test_a_cpu_op_rejects_a_flagos_generator_and_a_flagos_op_a_cpu_one():
    with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but found 'flagos'"):
        torch.randn(4, generator=torch.Generator(device="flagos"))
    with pytest.raises(RuntimeError, match="device type for generator but found 'cpu'"):
        torch.randn(4, device="flagos", generator=torch.Generator())


def test_default_draws_after_manual_seed_equal_native_ones():
    for draw in (
        lambda d: torch.randn(16, device=d),
        lambda d: torch.randint(0, 100, (16,), device=d),
        lambda d: torch.rand_like(torch.ones(16, device=d)),
        lambda d: torch.randperm(20, device=d),
        lambda d: torch.nn.functional.dropout(torch.ones(64, device=d), 0.5, training=True),
        lambda d: torch.bernoulli(torch.full((16,), 0.5, device=d)),
    ):
        torch.manual_seed(3)
        on_flagos = draw("flagos").cpu()
        torch.manual_seed(3)
        torch.testing.assert_close(on_flagos, draw(NATIVE).cpu(), rtol=0, atol=0)


# Per-device generators need two devices; on host backing the check runs in a process with two virtual devices.
TWO_DEVICES = """
import torch, torch_fl
from torch import nn

def draws(i):
    return [torch.randn(8, device=f"flagos:{i}").cpu(),
            nn.functional.dropout(torch.ones(32, device=f"flagos:{i}"), 0.5).cpu(),
            torch.randperm(10, device=f"flagos:{i}").cpu()]

def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))

torch.manual_seed(0)
first = draws(1)
torch.manual_seed(0)
draws(0)  # drawing on flagos:0 leaves flagos:1's stream where it was
assert same(draws(1), first), "flagos:0's draws moved flagos:1's generator"

torch.flagos.manual_seed_all(5)
with torch.flagos.device(1):
    torch.flagos.manual_seed(9)  # the current device only
assert torch.flagos.default_generators[0].initial_seed() == 5
assert torch.flagos.default_generators[1].initial_seed() == 9

state1 = torch.flagos.get_rng_state(1)
a = draws(1)
draws(0)
torch.flagos.set_rng_state(state1, 1)
assert same(draws(1), a), "replaying flagos:1 from its state"
states = torch.flagos.get_rng_state_all()
assert not torch.equal(states[0], states[1])
print("ok")
"""


def test_each_device_has_an_independent_generator():
    if torch.flagos.device_count() < 2:
        if ON_CUDA:
            pytest.skip("a CUDA backing with one GPU has no second device to compare")
        proc = run_python(TWO_DEVICES, env={"FLAGOS_HOST_DEVICES": "2"})
        assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr
    else:
        exec(compile(TWO_DEVICES, "TWO_DEVICES", "exec"), {})


@pytest.mark.cuda
def test_cuda_backing_draws_cuda_i_s_stream():
    for i in range(torch.flagos.device_count()):
        torch.cuda.manual_seed_all(11)
        on_flagos = torch.randn(32, device=f"flagos:{i}").cpu()
        torch.cuda.manual_seed_all(11)
        native = torch.randn(32, device=f"cuda:{i}").cpu()
        torch.testing.assert_close(on_flagos, native, rtol=0, atol=0)
        # One state: flagos:i's generator is cuda:i's.
        torch.flagos.manual_seed_all(4)
        assert torch.cuda.default_generators[i].initial_seed() == 4


@pytest.mark.parametrize(
    "make, kind",
    [
        (lambda: torch.randn(3, 3).to_sparse().to("flagos"), "sparse"),
        (lambda: torch.sparse_coo_tensor([[0, 1]], [1.0, 2.0], (3,), device="flagos"), "sparse"),
        (lambda: torch.randn(3, 3).to_sparse_csr().to("flagos"), "sparse"),
        (lambda: torch.quantize_per_tensor(torch.randn(3), 0.1, 0, torch.qint8).to("flagos"), "quantized"),
        # made by an operator from a dense flagos tensor: refused where the result would become flagos
        (lambda: torch.randn(3, 3, device="flagos").to_sparse(), "sparse"),
        (lambda: torch.randn(3, 3, device="flagos").to_sparse_csr(), "sparse"),
        (lambda: torch.quantize_per_tensor(torch.randn(3, device="flagos"), 0.1, 0, torch.qint8), "quantized"),
        (lambda: torch.quantize_per_tensor_dynamic(torch.randn(3, device="flagos"), torch.quint8, False), "quantized"),
    ],
    ids=["coo .to", "sparse_coo_tensor", "csr .to", "quantized .to", "to_sparse", "to_sparse_csr", "quantize",
         "quantize dynamic"],
)  # fmt: skip
def test_sparse_and_quantized_tensors_are_refused_with_the_way_out(make, kind):
    # CUDA has sparse and quantized kernels; PyTorch gives a PrivateUse1 device none (README, Limitations).
    # Refused where one is made, or at its first use (a CSR tensor's composite constructor makes one).
    with pytest.raises(NotImplementedError, match=f"{kind} tensors are not supported on flagos") as raised:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # quantize_per_tensor's deprecation, CSR's beta notice
            repr(make())
    assert "on the CPU" in str(raised.value)


@pytest.mark.skipif(ON_CUDA, reason="to_mkldnn has no CUDA kernel: CUDA's own error stands there")
def test_mkldnn_results_are_refused_on_host_backing():
    with pytest.raises(NotImplementedError, match=r"mkldnn tensors are not supported on flagos.*x\.cpu\(\)"):
        torch.randn(3, 3, device="flagos").to_mkldnn()
    torch.flagos.synchronize()  # nothing half-made is left behind: the device still works
    assert torch.ones(2, device="flagos").sum().item() == 2
