"""FlagosProcessGroup: torch.distributed's collectives on flagos tensors, done by gloo or NCCL.

The group is a `torch.distributed.ProcessGroup` (the Python subclass PyTorch lets a registered
backend return). Each collective maps its flagos tensors to their zero-copy native aliases
(`tensors.native`) and calls the same method of an inner, ordinary ProcessGroup whose backends are
the engines of `inner.py`: ProcessGroupNCCL for CUDA memory, ProcessGroupGloo for host memory. The
inner group's Work is returned as it is, so wait / is_completed / get_future / async_op behave as
gloo's or NCCL's do, and the results land in the caller's tensors (the aliases are their bytes).
No collective algorithm here: only tensors, devices and options are mapped.

On a CUDA backing NCCL runs on the current CUDA stream of the tensors' device, which is the current
flagos stream (flagos streams are CUDA streams), so NCCL's own stream semantics hold unchanged.

Every method is defined under its PyTorch 2.13 name and under the older name PyTorch 2.11 calls
(`_allgather_base`, `alltoall_base`, ...): PyTorch's C++ callers (DDP's reducer, functional
collectives) reach these through the ProcessGroup trampoline by either name.
"""

from __future__ import annotations

import inspect

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d

from torch_fl._core import DEVICE_NAME
from torch_fl.distributed import inner, nccl_rules
from torch_fl.distributed.backend_view import BackendView
from torch_fl.distributed.tensors import native, native_device, natives, nested
from torch_fl.distributed.work import flagos_work

BACKEND_NAME = "flagos"


def _first(inner_pg, *names):
    """The inner group's bound method under the first name this torch has (2.13's, then 2.11's)."""
    for name in names:
        method = getattr(inner_pg, name, None)
        if method is not None:
            return method
    raise AttributeError(f"torch.distributed.ProcessGroup has none of {names}")


_eager = False


def _run_eagerly(cls) -> None:
    """Each of `cls`'s methods run eagerly under torch.compile: DDP's C++ reducer calls the group from a compiled
    model's forward, and Dynamo, which never enters gloo's or NCCL's C++ groups, would trace into these Python
    methods and fail on the group, an opaque object to it (`torch.compile(DDP(model))`, Trainer's
    `torch_compile=True` under torchrun). Done when the first group is made: importing torch_fl imports no Dynamo."""
    global _eager
    if not _eager:
        _eager = True
        for name, fn in list(vars(cls).items()):
            if inspect.isfunction(fn) and not name.startswith("__"):
                setattr(cls, name, torch.compiler.disable(fn, recursive=True))


class FlagosProcessGroup(dist.ProcessGroup):
    """A process group for flagos tensors (and CPU tensors) over gloo or NCCL; see the module docstring."""

    def __init__(self, store, rank, size, timeout, group_name, global_ranks, options=None):
        _run_eagerly(FlagosProcessGroup)
        super().__init__(rank, size)  # the (store, rank, size) form cannot make a Python subclass
        self._store, self._timeout, self._options = store, timeout, options
        self._global_ranks = list(global_ranks)
        self._engines = inner.create(store, rank, size, timeout, group_name, self._global_ranks, options)
        # The inner group dispatches native tensors to their engine, with PyTorch's own handling
        # of every collective (coalesced forms, p2p, barrier devices).
        self._inner = dist.ProcessGroup(store, rank, size)
        backing = inner.default_device_type()
        for device_type, engine in self._engines.items():
            for pg in (self, self._inner):
                pg._register_backend(torch.device(device_type), inner.backend_type(device_type), engine)
        # flagos's own entry: what ProcessGroup's C++ side uses for a flagos device (coalescing
        # windows, sequence numbers, the group name, shutdown). Collectives never reach it with
        # flagos tensors: they come through the methods below.
        self._register_backend(torch.device(DEVICE_NAME), inner.backend_type(backing), self._engines[backing])
        for pg in (self, self._inner):
            pg._set_default_backend(inner.backend_type(backing))
            pg._set_group_name(group_name)
        self._bound_device = None
        self._splits = 0
        i = self._inner
        self._all_gather_single = _first(i, "all_gather_single", "_allgather_base")
        self._all_gather_single_coalesced = _first(i, "all_gather_single_coalesced", "allgather_into_tensor_coalesced")
        self._reduce_scatter_single = _first(i, "reduce_scatter_single", "_reduce_scatter_base")
        self._reduce_scatter_single_coalesced = _first(
            i, "reduce_scatter_single_coalesced", "reduce_scatter_tensor_coalesced"
        )
        self._all_to_all_single = _first(i, "all_to_all_single", "alltoall_base")

    # --- identity -------------------------------------------------------------------------------

    def getBackendName(self) -> str:  # noqa: N802  (the C++ name the ProcessGroup trampoline calls)
        return BACKEND_NAME

    def __repr__(self) -> str:
        return f"FlagosProcessGroup(rank={self.rank()}, size={self.size()}, engines={sorted(self._engines)})"

    def _get_backend(self, device):
        """The engine for `device` (flagos: the backing's), for PyTorch's Python callers (backend_view.py)."""
        device_type = torch.device(device).type
        engine = self._engines.get(inner.default_device_type() if device_type == DEVICE_NAME else device_type)
        if engine is None:
            raise RuntimeError(
                f"the flagos process group has no backend for device type {device_type}: it serves flagos "
                f"and cpu tensors (and cuda tensors on a CUDA backing)"
            )
        return BackendView(self, engine)

    @property
    def bound_device_id(self):
        return self._bound_device

    @bound_device_id.setter
    def bound_device_id(self, device):
        self._bound_device = device

    # --- collectives: each returns the inner Work, its future holding `result` (the caller's tensors)

    def broadcast(self, tensors, opts=None):
        tensors = _listed(tensors)
        return flagos_work(self._inner.broadcast(natives(tensors), _or(opts, c10d.BroadcastOptions)), tensors)

    # The reductions run through nccl_rules.reduction: NCCL's integer average on host memory too.
    def allreduce(self, tensors, opts=None):
        tensors, opts = _listed(tensors), _reduce_opts(opts, c10d.AllreduceOptions)
        work = nccl_rules.reduction(lambda s: self._inner.allreduce(s, opts), tensors, opts, self.size())
        return flagos_work(work, tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        tensors, opts = list(tensors), _reduce_opts(opts, c10d.AllreduceCoalescedOptions)
        work = nccl_rules.reduction(lambda s: self._inner.allreduce_coalesced(s, opts), tensors, opts, self.size())
        return flagos_work(work, tensors)

    def reduce(self, tensors, opts=None):
        tensors, opts = _listed(tensors), _or(opts, c10d.ReduceOptions)
        root = self.rank() == opts.rootRank  # only the root's tensors hold the result
        work = nccl_rules.reduction(lambda s: self._inner.reduce(s, opts), tensors, opts, self.size(), root)
        return flagos_work(work, tensors)

    def allgather(self, output_lists, inputs, opts=None):
        work = self._inner.allgather(nested(output_lists), natives(inputs), _or(opts, c10d.AllgatherOptions))
        return flagos_work(work, _flat(output_lists))

    def all_gather_single(self, output, input, opts=None):
        out, part = native(output), native(input)
        work = self._all_gather_single(
            nccl_rules.stacked(out, part, self.size()), part, _or(opts, c10d.AllgatherOptions)
        )
        return flagos_work(work, [output])

    _allgather_base = all_gather_single

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        work = self._inner.allgather_coalesced(nested(output_lists), natives(inputs), _or(opts, c10d.AllgatherOptions))
        return flagos_work(work, _flat(output_lists))

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        parts = natives(inputs)
        outs = [nccl_rules.stacked(o, p, self.size()) for o, p in zip(natives(outputs), parts, strict=True)]
        work = self._all_gather_single_coalesced(outs, parts, _or(opts, c10d.AllgatherOptions))
        return flagos_work(work, list(outputs))

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def gather(self, output_lists, inputs, opts=None):
        work = self._inner.gather(nested(output_lists), natives(inputs), _or(opts, c10d.GatherOptions))
        return flagos_work(work, _flat(output_lists))

    def scatter(self, outputs, input_lists, opts=None):
        work = self._inner.scatter(natives(outputs), nested(input_lists), _or(opts, c10d.ScatterOptions))
        return flagos_work(work, list(outputs))

    def reduce_scatter(self, outputs, input_lists, opts=None):
        outputs, opts, inputs = list(outputs), _or(opts, c10d.ReduceScatterOptions), nested(input_lists)
        work = nccl_rules.reduction(lambda s: self._inner.reduce_scatter(s, inputs, opts), outputs, opts, self.size())
        return flagos_work(work, outputs)

    def reduce_scatter_single(self, output, input, opts=None):
        opts = _or(opts, c10d.ReduceScatterOptions)
        part = nccl_rules.stacked(native(input), native(output), self.size())
        work = nccl_rules.reduction(
            lambda s: self._reduce_scatter_single(s[0], part, opts), [output], opts, self.size()
        )
        return flagos_work(work, [output])

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        outputs, opts = list(outputs), _or(opts, c10d.ReduceScatterOptions)
        ins = [nccl_rules.stacked(i, native(o), self.size()) for i, o in zip(natives(inputs), outputs, strict=True)]
        run = lambda s: self._reduce_scatter_single_coalesced(s, ins, opts)  # noqa: E731
        return flagos_work(nccl_rules.reduction(run, outputs, opts, self.size()), outputs)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = _or(opts, c10d.AllToAllOptions)
        work = self._all_to_all_single(native(output), native(input), output_split_sizes, input_split_sizes, opts)
        return flagos_work(work, [output])

    alltoall_base = all_to_all_single

    def alltoall(self, outputs, inputs, opts=None):
        work = self._inner.alltoall(natives(outputs), natives(inputs), _or(opts, c10d.AllToAllOptions))
        return flagos_work(work, list(outputs))

    def send(self, tensors, dst, tag=0):
        return flagos_work(self._inner.send(natives(tensors), dst, tag), list(tensors))

    def recv(self, tensors, src, tag=0):
        return flagos_work(self._inner.recv(natives(tensors), src, tag), list(tensors))

    def recv_anysource(self, tensors, tag=0):
        return flagos_work(self._inner.recv_anysource(natives(tensors), tag), list(tensors))

    def barrier(self, opts=None):
        opts = _or(opts, c10d.BarrierOptions)
        device = getattr(opts, "device", None)  # BarrierOptions.device is recent: PyTorch 2.11 may lack it
        if device is not None and device.type == DEVICE_NAME:
            opts.device = native_device(device)
        return flagos_work(self._inner.barrier(opts), [])

    # --- subgroups ------------------------------------------------------------------------------

    def split_group(self, ranks, timeout=None, opts=None, group_name=None, group_desc=None, device_types=None):
        """A group of `ranks` (ranks of this group), as torch.distributed.split_group asks of a
        parent: a new flagos group with engines of its own, or None on a rank outside `ranks`."""
        ranks = sorted(ranks)
        # The store keys of the new group's engines: PyTorch's group name for it can differ between
        # its members (it hashes per-process state too), and two splits to the same ranks must not
        # share keys; every rank of the parent calls split_group, so the count of calls and the
        # member ranks agree on every member and differ between splits.
        self._splits += 1
        if self.rank() not in ranks:
            return None
        from torch.distributed import PrefixStore

        store = PrefixStore(f"split/{self._splits}/{'-'.join(map(str, ranks))}/", self._store)
        global_ranks = [self._global_ranks[r] if self._global_ranks else r for r in ranks]
        pg = FlagosProcessGroup(
            store,
            ranks.index(self.rank()),
            len(ranks),
            timeout or self._timeout,
            group_name,
            global_ranks,
            opts if opts is not None else self._options,
        )
        if group_desc is not None:
            pg._set_group_desc(group_desc)
        return pg


def _listed(tensors):
    return [tensors] if isinstance(tensors, torch.Tensor) else tensors


def _flat(lists):
    return [t for ts in lists for t in ts]


def _or(opts, kind):
    return kind() if opts is None else opts


def _reduce_opts(opts, kind):
    """Options for a reduction; a bare ReduceOp (pg.allreduce(t, op)) becomes options of `kind`."""
    if opts is None or isinstance(opts, (dist.ReduceOp, dist.ReduceOp.RedOpType)):
        made = kind()
        if opts is not None:
            made.reduceOp = opts
        return made
    return opts
