"""flagos tensors between processes (torch_fl/multiprocessing.py): torch.multiprocessing queues and pipes,
DataLoader workers, share_memory_()/is_shared(), a Parameter, and the errors for what cannot work.

Processes are spawned (deterministic, and no fork of a process that runs threads). One consumer process
serves most tests (starting an interpreter costs seconds): it rebuilds what it is sent, and answers
about it, writes to it or sends it back on request. On host backing the memory is shared memory, on a
CUDA backing CUDA IPC memory: either way each side sees the other's writes.
"""

from __future__ import annotations

import multiprocessing.reduction
import os
import queue
import subprocess
import sys

import pytest
import torch
import torch.multiprocessing as mp
from torch.multiprocessing import reductions as torch_reductions

import torch_fl
import torch_fl.multiprocessing as flagos_mp
from tests.conftest import ON_CUDA
from tests.helpers import REPO

pytestmark = pytest.mark.anyplatform

ForkingPickler = multiprocessing.reduction.ForkingPickler
# A consumer's answer; waiting longer means it died (its error is then in the test's output).
REPLY_TIMEOUT_S = 120


# ---------------------------------------------------------------- the consumer process


def _describe(t):
    return {
        "type": type(t).__name__,
        "device": str(t.device),
        "dtype": t.dtype,
        "size": tuple(t.size()),
        "stride": t.stride(),
        "offset": t.storage_offset(),
        "values": t.detach().cpu().tolist(),
        "requires_grad": t.requires_grad,
        "is_shared": t.is_shared(),
    }


def _serve(requests, replies, conn):
    held = {}

    def hold(name, t):
        held[name] = t
        return _describe(t)

    def hold_nested(name, t):
        held[name] = t
        return {"is_nested": t.is_nested, "device": t.device.type, "values": [x.tolist() for x in t.unbind()]}

    def fill(name, value):
        held[name].detach().fill_(value)
        torch.flagos.synchronize()

    def send_back(name):
        # Pickled here, so that an error is this call's (a queue pickles in its feeder thread).
        return bytes(ForkingPickler.dumps(held[name]))

    def from_pipe(name):
        return hold(name, conn.recv())

    def memory(index, name):
        before = torch.flagos.memory_allocated(index)
        held.pop(name)
        return before - torch.flagos.memory_allocated(index)

    commands = {
        "hold": hold,
        "hold_nested": hold_nested,
        "read": lambda name: held[name].detach().cpu().tolist(),
        "fill": fill,
        "send_back": send_back,
        "from_pipe": from_pipe,
        "memory": memory,
    }
    while True:
        request = requests.get()
        if request is None:
            return
        name, args = request
        try:
            replies.put(("ok", commands[name](*args)))
        except Exception as e:  # the test that asked reads it
            replies.put(("error", f"{type(e).__name__}: {e}"))


class ConsumerError(Exception):
    pass


class Consumer:
    def __init__(self):
        ctx = mp.get_context("spawn")
        self.requests, self.replies = ctx.Queue(), ctx.Queue()
        self.conn, child_conn = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(self.requests, self.replies, child_conn), daemon=True)
        self.process.start()

    def call(self, command, *args):
        self.requests.put((command, args))
        try:
            status, value = self.replies.get(timeout=REPLY_TIMEOUT_S)
        except queue.Empty:
            raise AssertionError(
                f"the consumer did not answer {command!r} (exit code {self.process.exitcode})"
            ) from None
        if status == "error":
            raise ConsumerError(value)
        return value

    def stop(self):
        self.requests.put(None)
        self.process.join(REPLY_TIMEOUT_S)
        if self.process.is_alive():
            self.process.kill()


@pytest.fixture(scope="module")
def consumer():
    c = Consumer()
    yield c
    c.stop()


@pytest.fixture
def strategy():
    """Restores the sharing strategy a test changes."""
    before = mp.get_sharing_strategy()
    yield
    mp.set_sharing_strategy(before)


def _expect(t, seen):
    assert seen["type"] == type(t).__name__
    assert seen["device"] == str(t.device)
    assert seen["dtype"] == t.dtype
    assert seen["size"] == tuple(t.size())
    assert seen["stride"] == t.stride()
    assert seen["offset"] == t.storage_offset()
    assert seen["values"] == t.detach().cpu().tolist()
    assert seen["requires_grad"] == t.requires_grad


# ---------------------------------------------------------------- queues and pipes


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64], ids=lambda d: str(d)[6:]
)
def test_queue_round_trip_values_and_dtype(consumer, dtype):
    t = (torch.arange(12, device="flagos") % 5).to(dtype).reshape(3, 4)
    _expect(t, consumer.call("hold", "t", t))


def test_queue_round_trip_keeps_a_views_geometry(consumer):
    base = torch.arange(30.0, device="flagos").reshape(5, 6)
    view = base[1:, 1::2]  # offset 7, strides (6, 2): not contiguous
    assert view.storage_offset() == 7 and view.stride() == (6, 2)
    seen = consumer.call("hold", "view", view)
    _expect(view, seen)
    # The whole storage traveled: the consumer's view writes into the producer's base.
    consumer.call("fill", "view", -1.0)
    expected = torch.arange(30.0).reshape(5, 6)
    expected[1:, 1::2] = -1.0
    assert base.cpu().equal(expected)


def test_writes_after_sharing_are_seen_both_ways(consumer):
    t = torch.zeros(8, device="flagos")
    seen = consumer.call("hold", "shared", t)
    assert seen["is_shared"]
    assert t.is_shared()  # put on the queue: moved to shared memory (host) or IPC memory (CUDA), in place
    t[2:5] = 7.0  # the producer writes after sharing, through a view
    torch.flagos.synchronize()
    assert consumer.call("read", "shared") == [0.0, 0.0, 7.0, 7.0, 7.0, 0.0, 0.0, 0.0]
    consumer.call("fill", "shared", 3.0)  # the consumer writes
    assert t.cpu().tolist() == [3.0] * 8


def test_the_consumer_keeps_what_the_producer_dropped(consumer):
    t = torch.arange(5.0, device="flagos") * 3
    consumer.call("hold", "orphan", t)
    del t  # the producer's last reference: the memory lives on for the consumer (CUDA: in torch's IPC limbo)
    torch.flagos.empty_cache()
    assert consumer.call("read", "orphan") == [0.0, 3.0, 6.0, 9.0, 12.0]
    torch.flagos.ipc_collect()


def test_pipe_round_trip(consumer):
    t = torch.linspace(0, 1, 5, device="flagos")
    consumer.requests.put(("from_pipe", ("piped",)))
    consumer.conn.send(t)
    status, seen = consumer.replies.get(timeout=REPLY_TIMEOUT_S)
    assert status == "ok", seen
    _expect(t, seen)
    consumer.call("fill", "piped", 2.0)
    assert t.cpu().tolist() == [2.0] * 5


def test_parameter_round_trip(consumer):
    p = torch.nn.Parameter(torch.ones(2, 3, device="flagos"))
    seen = consumer.call("hold", "param", p)
    _expect(p, seen)
    assert seen["type"] == "Parameter" and seen["requires_grad"]
    consumer.call("fill", "param", 5.0)  # Hogwild: a worker updates the shared parameter
    assert p.detach().cpu().equal(torch.full((2, 3), 5.0))
    frozen = torch.nn.Parameter(torch.arange(3, device="flagos"), requires_grad=False)
    seen = consumer.call("hold", "frozen", frozen)
    assert seen["type"] == "Parameter" and not seen["requires_grad"]


def test_a_tensor_sent_back(consumer):
    t = torch.arange(4.0, device="flagos")
    consumer.call("hold", "echo", t)
    if ON_CUDA:
        # As for a CUDA tensor: IPC memory received from another process cannot be sent on.
        with pytest.raises(ConsumerError, match="received from another process"):
            consumer.call("send_back", "echo")
        return
    # As for a CPU tensor: it comes back over the producer's own storage.
    back = ForkingPickler.loads(consumer.call("send_back", "echo"))
    assert back.device == t.device
    assert back.untyped_storage()._cdata == t.untyped_storage()._cdata


@pytest.mark.skipif(ON_CUDA, reason="CUDA IPC memory is the caching allocator's; host memory is counted per device")
def test_shared_memory_is_counted_as_flagos_memory(consumer):
    t = torch.empty(1000, device="flagos")
    consumer.call("hold", "counted", t)
    # The consumer's mapping is flagos memory of flagos:0 there, released with its last tensor.
    assert consumer.call("memory", 0, "counted") == 4000


@pytest.mark.skipif(ON_CUDA, reason="the sharing strategies are host memory's (CUDA tensors travel over CUDA IPC)")
def test_file_system_strategy(consumer, strategy):
    mp.set_sharing_strategy("file_system")
    t = torch.arange(6.0, device="flagos")
    _expect(t, consumer.call("hold", "named", t))
    t.add_(1.0)
    assert consumer.call("read", "named") == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    consumer.call("fill", "named", 0.5)
    assert t.cpu().tolist() == [0.5] * 6


# ---------------------------------------------------------------- share_memory_ and is_shared


def test_share_memory_in_place():
    t = torch.arange(10.0, device="flagos")
    view = t[3:]
    storage = t.untyped_storage()
    if ON_CUDA:
        # As for CUDA tensors: already shareable (IPC), share_memory_() does nothing.
        assert t.is_shared() and storage.is_shared()
        ptr = t.data_ptr()
        assert t.share_memory_() is t and t.data_ptr() == ptr
        return
    assert not t.is_shared() and not storage.is_shared()
    before = torch.flagos.memory_allocated(0)
    assert t.share_memory_() is t
    # Moved in place: every view follows, the values stay, the device and its memory count stay.
    assert t.is_shared() and view.is_shared() and storage.is_shared()
    assert view.data_ptr() == t.data_ptr() + 3 * 4
    assert t.device == torch.device("flagos", 0)
    assert t.cpu().equal(torch.arange(10.0)) and view.cpu().equal(torch.arange(3.0, 10.0))
    assert torch.flagos.memory_allocated(0) == before
    # Shared memory keeps its size, as on the CPU.
    assert not storage.resizable()
    with pytest.raises(RuntimeError, match="not resizable"):
        t.resize_(100)


@pytest.mark.skipif(ON_CUDA, reason="host backing's shared memory (CUDA storages are shared by IPC)")
def test_storage_share_memory_and_both_strategies(strategy):
    storage = torch.arange(4, dtype=torch.int32, device="flagos").untyped_storage()
    assert storage.share_memory_() is storage and storage.is_shared()
    assert torch_fl._C._host_shared_storage(storage)[1] == "file_descriptor"
    ptr = storage.data_ptr()
    storage.share_memory_()  # already there: nothing moves
    assert storage.data_ptr() == ptr
    mp.set_sharing_strategy("file_system")
    storage.share_memory_()  # shared with the other strategy: moves again, as a CPU storage does
    assert torch_fl._C._host_shared_storage(storage)[1] == "file_system"
    assert storage.is_shared()
    assert torch.empty(0, dtype=torch.int32, device="flagos").set_(storage).cpu().tolist() == [0, 1, 2, 3]


def test_new_shared_storage_is_shared_memory():
    # What default_collate asks for in a DataLoader worker: the batch is stacked there, then sent.
    elem = torch.ones(3, device="flagos")
    storage = elem._typed_storage()._new_shared(6, device=elem.device)._untyped_storage
    assert storage.device == torch.device("flagos", 0) and storage.nbytes() == 24
    assert storage.is_shared()
    if not ON_CUDA:  # made in shared memory (no copy when sent), as for the CPU
        assert torch_fl._C._host_shared_storage(storage)[1] == mp.get_sharing_strategy()


@pytest.mark.skipif(ON_CUDA, reason="a CUDA IPC handle is opened in another process only")
def test_pickled_in_one_process_over_one_storage():
    t = torch.arange(6.0, device="flagos").reshape(2, 3)
    back = ForkingPickler.loads(ForkingPickler.dumps(t[1]))
    # The shared cache maps the memory back to the storage it came from, as for CPU tensors.
    assert back.untyped_storage()._cdata == t.untyped_storage()._cdata
    assert back.storage_offset() == 3 and back.cpu().tolist() == [3.0, 4.0, 5.0]


def test_other_tensors_keep_torchs_reducers():
    assert ForkingPickler._extra_reducers[torch.Tensor] is flagos_mp.reduce_tensor
    assert ForkingPickler._extra_reducers[torch.nn.Parameter] is flagos_mp.reduce_tensor
    assert ForkingPickler._extra_reducers[torch.UntypedStorage] is flagos_mp.reduce_storage
    cpu = torch.arange(3.0)
    rebuild, args = flagos_mp.reduce_tensor(cpu)
    assert rebuild is torch_reductions.rebuild_tensor
    assert not cpu.is_shared()
    cpu.share_memory_()  # torch's own, unchanged
    assert cpu.is_shared()
    assert ForkingPickler.loads(ForkingPickler.dumps(cpu)).equal(cpu)


# ---------------------------------------------------------------- DataLoader workers


class _Squares(torch.utils.data.Dataset):
    """Each worker makes flagos tensors; default_collate stacks them there."""

    def __len__(self):
        return 6

    def __getitem__(self, i):
        return torch.full((2,), float(i * i), device="flagos"), i


def test_dataloader_workers_return_flagos_tensors():
    loader = torch.utils.data.DataLoader(
        _Squares(), batch_size=2, num_workers=2, multiprocessing_context="spawn", timeout=REPLY_TIMEOUT_S
    )
    labels_seen = []
    # Each batch is checked while the workers live: on a CUDA backing they own the IPC memory.
    for values, labels in loader:
        assert values.device == torch.device("flagos", 0)
        assert values.is_shared()
        assert values.cpu().tolist() == [[float(i * i)] * 2 for i in labels.tolist()]
        labels_seen += labels.tolist()
    assert labels_seen == list(range(6))


# ---------------------------------------------------------------- errors


def test_error_for_a_consumer_of_another_backing():
    # The rebuild of the other backing's pickle, in this process, as a consumer of that backing would run it.
    if ON_CUDA:
        r, w = os.pipe()
        os.close(w)

        class _Fd:
            def detach(self):
                return r

        with pytest.raises(RuntimeError, match=r"backed by host memory cannot be rebuilt.*FLAGOS_ACCELERATOR=cpu"):
            flagos_mp.rebuild_storage_fd(0, _Fd(), 4)
    else:
        with pytest.raises(RuntimeError, match=r"backed by a CUDA GPU cannot be rebuilt.*FLAGOS_ACCELERATOR=cuda"):
            flagos_mp.rebuild_cuda_tensor(torch.Tensor, False, None, (None,) * 6 + (0,))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_a_jagged_nested_tensor_travels(consumer):
    """Strided nested tensors cannot be made on flagos (a NotImplementedError naming the jagged layout); jagged
    ones are a Python subclass over flagos tensors, which travel through the flagos reducer (to another process:
    CUDA IPC cannot open memory in the process that shared it)."""
    nested = torch.nested.nested_tensor([torch.ones(2), torch.arange(3.0)], layout=torch.jagged, device="flagos")
    seen = consumer.call("hold_nested", "nested", nested)
    assert seen == {"is_nested": True, "device": "flagos", "values": [[1.0, 1.0], [0.0, 1.0, 2.0]]}


def test_error_for_a_non_leaf_that_requires_grad():
    x = torch.ones(3, device="flagos", requires_grad=True)
    with pytest.raises(RuntimeError, match="Cowardly refusing to serialize non-leaf tensor"):
        ForkingPickler.dumps(x * 2)


@pytest.mark.skipif(not ON_CUDA, reason="host-backed flagos storages are pickled (shared memory)")
def test_error_for_a_storage_on_cuda():
    with pytest.raises(RuntimeError, match="Cannot pickle a flagos storage on a CUDA backing"):
        ForkingPickler.dumps(torch.ones(2, device="flagos").untyped_storage())


# ---------------------------------------------------------------- flagos:1


TWO_DEVICES = """
import os
import torch
import torch.multiprocessing as mp
import torch_fl


def consume(q, out):
    try:
        t = q.get()
        out.put((str(t.device), t.cpu().tolist(), t.stride(), t.storage_offset()))
    except Exception as e:
        out.put(f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    t = torch.arange(12.0, device="flagos:1").reshape(3, 4)[:, 1:]
    for devices in ("2", "1"):
        q, out = ctx.Queue(), ctx.Queue()
        os.environ["FLAGOS_HOST_DEVICES"] = devices  # the consumer's own device count (host backing)
        p = ctx.Process(target=consume, args=(q, out), daemon=True)
        p.start()
        q.put(t)
        print(devices, out.get(timeout=120))
        p.join()
"""


def test_a_tensor_of_flagos_1(tmp_path):
    if ON_CUDA and torch.flagos.device_count() < 2:
        pytest.skip("needs two flagos devices (two GPUs on a CUDA backing)")
    script = tmp_path / "two_devices.py"  # a file: spawn re-imports the main module's functions from it
    script.write_text(TWO_DEVICES)
    env = {**os.environ, "FLAGOS_HOST_DEVICES": "2", "PYTHONPATH": REPO}
    proc = subprocess.run([sys.executable, str(script)], cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "2 ('flagos:1', [[1.0, 2.0, 3.0], [5.0, 6.0, 7.0], [9.0, 10.0, 11.0]], (4, 1), 1)"
    if not ON_CUDA:  # a consumer with one device cannot hold flagos:1
        assert (
            "flagos tensor shared from flagos:1 cannot be rebuilt in this process, which has 1 flagos device"
            in (lines[1])
        )
