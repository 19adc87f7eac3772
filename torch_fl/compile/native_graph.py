"""Compiled flagos graphs run on the backing device inside: no route between their calls.

A compiled graph's calls outside its own kernels (matmuls, attention, fallbacks, custom operators, and what those
run eagerly) would each take a flagos route: the native route's aliases cost a microsecond or so a call, most of a
small model's compiled time. When every operator takes its native route, those calls gain nothing from it. So a
flagos graph's wrapper (wrapper.py) runs its inside on the backing device:

- at entry (`graph_inputs`) its flagos inputs become native aliases over the same memory (a parameter's alias is
  kept for the next call, while it still fits: making one per input and call was most of a small model's entry);
- its buffers are the backing device's (`graph_empty_strided`);
- at return (`graph_outputs`) its flagos outputs become flagos tensors again (a fresh buffer is retagged in place,
  a view of an input maps back to the input's storage).

A graph runs so when it qualified at compile time (`Qualification`) and, at each call, every operator still takes
its native route and no call is logged (routing tells the core whenever its table or flags change). Otherwise the
same wrapper runs as before: flagos inputs and buffers, each call on its route. Changing routes needs no recompile.

A graph qualifies unless:
- it is captured as a CUDA graph (mode="reduce-overhead": replays run no calls anyway) or tracks memory lifecycles
  (an inductor test configuration);
- it calls an operator kept as a call (keep_as_calls: kept to run on its route and be counted);
- it names the flagos device in an argument (a factory's device=): the call would make flagos tensors inside;
- it resizes or re-points a storage, accumulates a gradient, or calls a collective (on an alias these would miss
  the flagos tensor, or find no process group for the backing device);
- on host backing, it calls a random operator (randint for a graph's seeds, attention with dropout): natively it
  would draw from the CPU's generator, not flagos's (on a CUDA backing flagos:i's generator is cuda:i's);
- it calls an operator the backing device lacks a kernel for (the native route runs those on the CPU), or, on
  host backing, histc or trace with a dtype the CPU does not take (flagos widens them).
"""

from __future__ import annotations

import functools
import re

import torch
from torch._inductor import config as inductor_config

from torch_fl._core import _C, DEVICE_NAME
from torch_fl.compile import keep_calls
from torch_fl.flagos._device import on_cuda

#: the wrapper module's names for the boundary functions (written into the wrapper's header)
INPUTS = "graph_inputs"
ALLOCATE = "graph_empty_strided"
OUTPUTS = "graph_outputs"
#: the module constant the wrapper's entry reads: whether the graph qualified
QUALIFIED = "graph_runs_natively"
#: the module's store of its parameters' entry aliases, kept between calls (`graph_inputs`)
ENTRY_ALIASES = "graph_entry_aliases"


def header_lines() -> list[str]:
    return [
        f"from torch_fl._C import _graph_inputs as {INPUTS}",
        f"from torch_fl._C import _graph_empty_strided as {ALLOCATE}",
        f"from torch_fl._C import _graph_outputs as {OUTPUTS}",
        "from torch_fl._C import _graph_entry_aliases",
        f"{ENTRY_ALIASES} = _graph_entry_aliases()",
    ]


#: c10's names of the integer and bool scalar types in _C._host_dtype_gaps()
_SCALAR_TYPES = {
    "Char": torch.int8,
    "Short": torch.int16,
    "Int": torch.int32,
    "Long": torch.int64,
    "Bool": torch.bool,
    "Byte": torch.uint8,
}


@functools.cache
def _host_gaps() -> dict[str, set[torch.dtype]]:
    """Overload ('histc', 'histc.out') -> the dtypes flagos widens on host backing, from _C._host_dtype_gaps()
    ('histc: Char, Short, Int, Long -> Double')."""
    gaps = {}
    for line in _C._host_dtype_gaps():
        op, rest = line.split(":", 1)
        gaps[op.strip()] = {_SCALAR_TYPES[n.strip()] for n in rest.split("->", 1)[0].split(",")}
    return gaps


def _has_backing_kernel(op: torch._ops.OpOverload) -> bool:
    """Whether the backing device runs `op` itself (a kernel of its own or a composite one)."""
    name = op.name()
    for key in ("CUDA" if on_cuda() else "CPU", "CompositeExplicitAutograd", "CompositeImplicitAutograd"):
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
            return True
    return False


#: Calls that would act on a native alias instead of the flagos tensor itself (a resized or re-pointed storage,
#: an accumulated .grad), or reach a process group through the backing device's type, which flagos's groups do not
#: serve: the graph stays on its routes.
_IDENTITY_CALLS = re.compile(
    r"resize_storage_bytes_|\.resize_\(|resize_as_|\bset_\.|\.set_\(|accumulate_grad_|_c10d_functional|\bc10d\."
)


class Qualification:
    """Whether one graph may run on the backing device, gathered while its wrapper is generated."""

    def __init__(self):
        self.reasons: list[str] = []
        if inductor_config.triton.cudagraphs:
            self.reasons.append("captured as a CUDA graph")
        if inductor_config.test_configs.track_memory_lifecycle:
            self.reasons.append("memory lifecycle tracking")

    @property
    def qualified(self) -> bool:
        return not self.reasons

    def note_code(self, code: str) -> None:
        """The wrapper's Python code (not its kernels'): calls that act on a tensor's identity or storage rather than
        its memory, or on flagos's process groups."""
        found = _IDENTITY_CALLS.search(code)
        if found:
            self.reasons.append(f"{found.group(0).strip('.(')} acts on a tensor's storage, gradient or process group")

    def note_value(self, value) -> None:
        """An argument the wrapper writes: a flagos device makes flagos tensors inside the graph."""
        if isinstance(value, torch.device) and value.type == DEVICE_NAME:
            self.reasons.append("a flagos device argument")

    def note_call(self, node) -> None:
        """An extern or fallback kernel the wrapper calls (an ir.ExternKernel)."""
        op = getattr(node, "op_overload", None)
        if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
            return  # inductor's extern kernels (mm, bmm, ...) and other libraries' operators run as on the device
        if keep_calls.is_kept(op):
            self.reasons.append(f"{op.name()} is kept as a call on its route (keep_as_calls)")
            return
        if not _has_backing_kernel(op):
            self.reasons.append(f"{op.name()} has no kernel of the backing device")
            return
        if on_cuda():
            return  # flagos:i's generator is cuda:i's own: a native draw is the same draw
        if torch.Tag.nondeterministic_seeded in op.tags and _argument(node, op, "dropout_p", 1.0) != 0:
            self.reasons.append(f"{op.name()} draws from flagos's generator")
            return
        overload = op.name().removeprefix("aten::") + ("" if op._overloadname == "default" else f".{op._overloadname}")
        widened = _host_gaps().get(overload)
        if widened and any(_dtype(x) in widened for x in getattr(node, "inputs", ())):
            self.reasons.append(f"{overload} with a dtype flagos widens on host backing")


def _argument(node, op: torch._ops.OpOverload, name: str, absent):
    """The value of `op`'s argument `name` in the call an inductor fallback kernel `node` makes (its own default
    where the call leaves it out), `absent` where the schema has no such argument or the value is not known."""
    unflatten = getattr(node, "unflatten_args", None)
    if unflatten is None:
        return absent
    args, kwargs = unflatten(node.inputs, node.constant_args)
    kwargs = {**(kwargs or {}), **(getattr(node, "kwargs", None) or {})}
    for i, arg in enumerate(op._schema.arguments):
        if arg.name == name:
            if i < len(args):
                return args[i]
            if name in kwargs:
                return kwargs[name]
            return arg.default_value if arg.has_default_value() else absent
    return absent


def _dtype(node):
    get = getattr(node, "get_dtype", None)
    return get() if get is not None else None
