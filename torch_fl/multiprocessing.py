"""flagos tensors between processes: torch.multiprocessing queues and pipes, DataLoader workers,
`share_memory_()` and `is_shared()`.

Why a module of its own, named after torch.multiprocessing: PyTorch keeps its reducers in
torch.multiprocessing.reductions and registers them in ForkingPickler's table by type at import, with no
hook per device. torch_fl registers its own reducers for torch.Tensor, Parameter and UntypedStorage here
(install(), at `import torch_fl`): each handles flagos objects and hands every other object to torch's
reducer unchanged. A pickle names its rebuild function by module, so the consumer's unpickling imports
torch_fl.multiprocessing, and with it torch_fl (the device registered) before anything flagos is rebuilt.
The answers of share_memory_() and is_shared() for flagos storages are the producer's half of the same
mechanism, so they live here too, not in torch_fl.flagos (torch.cuda's counterpart, which has no sharing).

CUDA backing: a flagos tensor travels as its native CUDA alias (torch_fl.as_native) through torch's own
reduce_tensor, over CUDA IPC, and the consumer rebuilds it with torch's rebuild_cuda_tensor and views it
as flagos on the same index. CUDA's rules apply unchanged: the producer's memory stays alive until every
consumer has released it (torch's IPC reference counts and its limbo; torch.flagos.ipc_collect()), a
tensor received from another process cannot be sent on, and share_memory_() is a no-op (is_shared() is
True), as for CUDA tensors.

Host backing: CPU semantics. share_memory_() moves a flagos storage's bytes into shared memory in place,
made by PyTorch's own sharing strategy (torch.multiprocessing.get_sharing_strategy(): file_descriptor or
file_system), so every tensor over the storage follows and later writes on either side are seen by the
other. The memory stays flagos memory of its device: tagged flagos:i and counted in torch.flagos's
memory statistics, in each process that maps it. Putting a flagos tensor on a queue shares it that way
first, as for a CPU tensor, and the consumer rebuilds it as a flagos tensor on the same device index;
a DataLoader worker's default_collate stacks its batch straight into shared memory (_new_shared), as on
the CPU. Like a CPU storage in shared memory, such a storage can no longer be resized. A native alias
taken with as_native() before the move still points at the old memory, which the move frees
(as a resize_() does): take the alias again after the move.
"""

from __future__ import annotations

import functools
import multiprocessing.reduction
import os

import torch
from torch.multiprocessing import get_sharing_strategy
from torch.multiprocessing import reductions as _torch

from torch_fl._core import _C, DEVICE_NAME, as_flagos, as_native, backing

# What each backing (torch_fl.backing()) is called in errors.
_BACKINGS = {"cuda": "a CUDA GPU", "cpu": "host memory"}


def _host() -> bool:
    return backing() == "cpu"


# ---------------------------------------------------------------- the producer's side


def reduce_tensor(tensor):
    """ForkingPickler's reducer for torch.Tensor and Parameter: flagos tensors here, all others torch's."""
    if tensor.device.type != DEVICE_NAME:
        return _torch.reduce_tensor(tensor)
    if tensor.is_nested or tensor.layout != torch.strided:
        what = "a nested flagos tensor" if tensor.is_nested else f"a flagos tensor of layout {tensor.layout}"
        raise RuntimeError(
            f"torch_fl: cannot share {what} between processes: only strided flagos tensors can be shared. Send "
            "its parts instead (a nested tensor's unbind(), a sparse tensor's to_dense() or indices and values)."
        )
    if _host():
        # torch's CPU path: the tensor's storage is pickled on its own (reduce_storage below), its geometry
        # with torch's rebuild_tensor, which makes the tensor on the rebuilt storage's device.
        return _torch.reduce_tensor(tensor)
    return _reduce_cuda_tensor(tensor)


def _reduce_cuda_tensor(tensor):
    if tensor.requires_grad and not tensor.is_leaf:
        raise RuntimeError(
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd does not support "
            "crossing process boundaries.  If you just want to transfer the data, call detach() on the tensor "
            "before serializing (e.g., putting it on the queue)."
        )
    torch.utils.hooks.warn_if_has_hooks(tensor)
    # torch's CUDA path on the zero-copy CUDA alias: an IPC handle of the caching allocator's block, and a
    # reference-counted DataPtr on the alias that keeps the flagos storage (which the alias holds) alive
    # until the consumers release it.
    rebuild, args = _torch.reduce_tensor(as_native(tensor))
    return (rebuild_cuda_tensor, (type(tensor), tensor.requires_grad, rebuild, args))


def reduce_storage(storage):
    """ForkingPickler's reducer for UntypedStorage: flagos storages here (host backing), all others torch's."""
    if storage.device.type != DEVICE_NAME:
        return _torch.reduce_storage(storage)
    if not _host():
        raise RuntimeError(
            "Cannot pickle a flagos storage on a CUDA backing (as for CUDA storages); pickle a flagos tensor "
            "over it instead (torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage))."
        )
    index = storage.device.index
    strategy = get_sharing_strategy()
    if strategy == "file_descriptor" and storage.nbytes() == 0:
        return (rebuild_storage_empty, (index,))  # as torch: an empty file cannot be mapped
    storage.share_memory_()
    shared, _ = _C._host_shared_storage(storage)
    if strategy == "file_system":
        manager, handle, size = shared._share_filename_cpu_()
        shared._shared_incref()  # the consumer's rebuild releases it (torch's protocol)
        key = handle
        rebuild, metadata = rebuild_storage_filename, (index, manager, handle, size)
    else:
        fd, size = shared._share_fd_cpu_()
        key = _torch.fd_id(fd)
        rebuild, metadata = rebuild_storage_fd, (index, multiprocessing.reduction.DupFd(fd), size)
    # The producer too: a storage sent back to it is rebuilt as the storage it sent.
    _torch.shared_cache[(DEVICE_NAME, key)] = _torch.StorageWeakRef(storage)
    return (rebuild, metadata)


def _move_to_shared(storage) -> None:
    """Host backing: the flagos storage's bytes into shared memory of the current sharing strategy, in place
    (nothing to do if they are there already)."""
    strategy = get_sharing_strategy()
    found = _C._host_shared_storage(storage)
    if found is not None and found[1] == strategy:
        return
    # As a CPU storage shared with one strategy and pickled with the other, it moves again.
    _C._host_move_to_shared(storage, _shared_cpu_storage(storage.nbytes()))


def _shared_cpu_storage(nbytes: int):
    """A CPU storage of `nbytes` in shared memory, made by the current sharing strategy."""
    if get_sharing_strategy() == "file_system":
        return torch.UntypedStorage._new_using_filename_cpu(nbytes)
    return torch.UntypedStorage._new_using_fd_cpu(nbytes)


# UntypedStorage.share_memory_'s lock: one move per storage at a time, waited for by a second caller.
_move_to_shared_locked = torch.storage._share_memory_lock_protected(_move_to_shared)


# ---------------------------------------------------------------- the consumer's side


def _check_consumer(index: int, theirs: str) -> None:
    here = backing()
    if here != theirs:
        raise RuntimeError(
            f"torch_fl: a flagos tensor shared by a process whose flagos is backed by {_BACKINGS[theirs]} cannot "
            f"be rebuilt in this process, whose flagos is backed by {_BACKINGS[here]}: the memory is "
            f"{'CUDA IPC memory' if theirs == 'cuda' else 'host shared memory'}. Give both processes the same "
            f"backing (FLAGOS_ACCELERATOR={theirs} in the consumer's environment), or send tensor.cpu() instead."
        )
    count = _C._device_count()
    if index >= count:
        how = "FLAGOS_HOST_DEVICES" if theirs == "cpu" else "CUDA_VISIBLE_DEVICES"
        raise RuntimeError(
            f"torch_fl: a flagos tensor shared from flagos:{index} cannot be rebuilt in this process, which has "
            f"{count} flagos device{'s' if count != 1 else ''}. Give the consumer as many devices as the producer "
            f"({how}), or move the tensor to a device both have before sending it."
        )


def _as_cls(cls, tensor, requires_grad: bool):
    if cls == torch.nn.parameter.Parameter:
        # The constructor takes requires_grad: integer tensors must get False there (torch's rebuild does so).
        return torch.nn.parameter.Parameter(tensor, requires_grad=requires_grad)
    tensor.requires_grad = requires_grad
    return tensor


def rebuild_cuda_tensor(cls, requires_grad, rebuild, args):
    """A flagos tensor from a CUDA-backed producer: torch's rebuild of the CUDA tensor, viewed as flagos."""
    index = args[6]  # the storage's CUDA device, as torch's _share_cuda_ gives it
    _check_consumer(index, "cuda")
    native = rebuild(*args)
    native_storage = native.untyped_storage()
    # One flagos storage per received CUDA storage (views sent apart share it, as they do on CUDA). The
    # flagos storage holds the CUDA one, so while it lives the key names that storage.
    key = (DEVICE_NAME, "cuda", native_storage._cdata)
    storage = _torch.storage_from_cache(torch.UntypedStorage, key)
    if storage is None or storage.data_ptr() != native_storage.data_ptr():
        whole = torch.empty(0, dtype=torch.uint8, device=native.device).set_(native_storage)
        storage = as_flagos(whole).untyped_storage()
        _torch.shared_cache[key] = _torch.StorageWeakRef(storage)
    typed = torch.storage.TypedStorage(wrap_storage=storage, dtype=native.dtype, _internal=True)
    tensor = torch._utils._rebuild_tensor(typed, native.storage_offset(), native.size(), native.stride())
    return _as_cls(cls, tensor, requires_grad)


def rebuild_storage_fd(index, df, size):
    """A host-backed flagos storage from its shared memory's file descriptor (file_descriptor strategy)."""
    fd = df.detach()
    try:
        _check_consumer(index, "cpu")
        key = (DEVICE_NAME, _torch.fd_id(fd))
        storage = _torch.storage_from_cache(torch.UntypedStorage, key)
        if storage is not None:
            return storage
        shared = torch.UntypedStorage._new_shared_fd_cpu(fd, size)
        storage = _C._host_wrap_shared(shared, index)
        _torch.shared_cache[key] = _torch.StorageWeakRef(storage)
        return storage
    finally:
        os.close(fd)


def rebuild_storage_filename(index, manager, handle, size):
    """A host-backed flagos storage from its shared memory's file name (file_system strategy)."""
    key = (DEVICE_NAME, handle)
    storage = _torch.storage_from_cache(torch.UntypedStorage, key)
    if storage is not None:
        _C._host_shared_storage(storage)[0]._shared_decref()
        return storage
    shared = torch.UntypedStorage._new_shared_filename_cpu(manager, handle, size)
    shared._shared_decref()  # the producer's reference for this message (mapped here, ours now holds it)
    _check_consumer(index, "cpu")
    storage = _C._host_wrap_shared(shared, index)
    _torch.shared_cache[key] = _torch.StorageWeakRef(storage)
    return storage


def rebuild_storage_empty(index):
    """An empty flagos storage on flagos:index."""
    _check_consumer(index, backing())
    return torch.UntypedStorage(0, device=torch.device(DEVICE_NAME, index))


# ---------------------------------------------------------------- share_memory_ and is_shared


def _patch_storage() -> None:
    """UntypedStorage.share_memory_ (which Tensor.share_memory_ calls), is_shared (Tensor.is_shared) and
    _new_shared (where default_collate stacks a DataLoader worker's batch) for host-backed flagos storages,
    and is_shared for flagos storages on a CUDA backing; every other call gets torch's own."""
    share_memory_ = torch.UntypedStorage.share_memory_
    is_shared = torch.UntypedStorage.is_shared
    new_shared = torch.UntypedStorage._new_shared
    if getattr(share_memory_, "_flagos", False):
        return

    @functools.wraps(share_memory_)
    def flagos_share_memory_(self, *args, **kwargs):
        if self.device.type == DEVICE_NAME and _host():
            _move_to_shared_locked(self)
            return self
        return share_memory_(self, *args, **kwargs)

    @functools.wraps(is_shared)
    def flagos_is_shared(self):
        if self.device.type == DEVICE_NAME:
            # On a CUDA backing flagos memory is CUDA memory, shared over CUDA IPC where it is: True, as
            # PyTorch answers for every CUDA storage (its own answer for a flagos one is False).
            return _C._host_shared_storage(self) is not None if _host() else True
        return is_shared(self)

    @functools.wraps(new_shared)
    def flagos_new_shared(cls, size, *, device="cpu"):
        device = torch.device(device)
        if device.type == DEVICE_NAME and _host():
            # As for the CPU: the batch is stacked straight into shared memory, not copied there when sent.
            index = device.index if device.index is not None else _C._current_device()
            return _C._host_wrap_shared(_shared_cpu_storage(size), index)
        return new_shared(size, device=device)

    flagos_share_memory_._flagos = True
    flagos_is_shared._flagos = True
    flagos_new_shared._flagos = True
    torch.UntypedStorage.share_memory_ = flagos_share_memory_
    torch.UntypedStorage.is_shared = flagos_is_shared
    torch.UntypedStorage._new_shared = classmethod(flagos_new_shared)


def install() -> None:
    """Register the reducers with ForkingPickler (torch.multiprocessing's queues and pipes, DataLoader
    workers) and answer share_memory_/is_shared for flagos storages. At `import torch_fl`."""
    for cls in (torch.Tensor, torch.nn.parameter.Parameter):
        multiprocessing.reduction.ForkingPickler.register(cls, reduce_tensor)
    multiprocessing.reduction.ForkingPickler.register(torch.UntypedStorage, reduce_storage)
    _patch_storage()
