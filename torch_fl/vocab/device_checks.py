"""The operators whose CUDA kernels check that every tensor is on one device, CPU scalars included.

PyTorch's code generator wraps each CUDA kernel in a device check unless native_functions.yaml says
`device_check: NoCheck` (the TensorIterator operators, whose kernels take a 0-dim CPU tensor as a scalar
input, and the few that mix devices by design). `index_select(w, 0, torch.tensor(3))` on CUDA so raises
"Expected all tensors to be on the same device", where `x * torch.tensor(2.)` runs. flagos's device check
(csrc/route/device_check.h) refuses a CPU scalar for the operators named here on every backing: on host
memory the CPU's kernels would take it, and code that works there would fail on a GPU.

The names come from the installed PyTorch's own native_functions.yaml (in its torchgen package), read
once at import (a few milliseconds): the entries with a CUDA kernel (a `CUDA` dispatch key, or a
structured delegate that has one) and no `device_check: NoCheck`. The kernels that check some arguments'
devices themselves (masked_fill's mask) are not in the yaml: measured_entries() names those arguments.
"""

from __future__ import annotations

import functools
import os

import torch


def native_functions_path() -> str:
    """Where the installed PyTorch keeps native_functions.yaml (torchgen/packaged, beside torch)."""
    site = os.path.dirname(os.path.dirname(torch.__file__))
    return os.path.join(site, "torchgen", "packaged", "ATen", "native", "native_functions.yaml")


def _entries(lines):
    """(name, the entry's other lines) per `- func:` entry of native_functions.yaml."""
    name, body = None, []
    for line in lines:
        if line.startswith("- func:"):
            if name is not None:
                yield name, body
            name, body = line[len("- func:") :].strip().split("(", 1)[0], []
        elif name is not None:
            body.append(line.strip())
    if name is not None:
        yield name, body


@functools.lru_cache(maxsize=2)
def _read(path: str | None) -> tuple:
    """native_functions.yaml's entries; none where this PyTorch carries no native_functions.yaml."""
    try:
        with open(path or native_functions_path(), encoding="utf-8") as f:
            return tuple(_entries(f))
    except OSError:
        return ()


def checked_ops(path: str | None = None) -> list[str]:
    """The operators ("name" or "name.overload") whose CUDA kernels check every tensor's device; empty where
    this PyTorch carries no native_functions.yaml (the check then takes CPU scalars everywhere, as before)."""
    entries = _read(path)
    has_cuda, unchecked, delegate = set(), set(), {}
    for name, body in entries:
        for line in body:
            key, _, value = line.split("#", 1)[0].partition(":")
            if "," in key or key.strip() == "CUDA":
                if "CUDA" in (k.strip() for k in key.split(",")):
                    has_cuda.add(name)
            elif key == "device_check" and value.strip() == "NoCheck":
                unchecked.add(name)
            elif key == "structured_delegate":
                delegate[name] = value.strip()
    return sorted(
        name for name, _ in entries if name not in unchecked and (name in has_cuda or delegate.get(name) in has_cuda)
    )


def tensor_iterator_ops(path: str | None = None) -> list[str]:
    """The structured TensorIterator operators (`structured_inherits: TensorIteratorBase`): TensorIterator computes
    on the output's device and takes a CPU scalar only beside an input there, so an out= call of one whose inputs
    are all CPU scalars raises on CUDA. Others do too (measured_out_ops()); some read them on the host
    (linspace's out=)."""
    return sorted(
        name
        for name, body in _read(path)
        if any(line.replace(" ", "") == "structured_inherits:TensorIteratorBase" for line in body)
    )


def measured_entries() -> list[str]:
    """ "op.overload:arg,arg" for the arguments CUDA's kernels check themselves: measured on a GPU
    (torch_fl/conformance/cpu_scalars.py), committed as torch_fl/vocab/cpu_scalar_checks.py."""
    from torch_fl.vocab.cpu_scalar_checks import REFUSED

    return [f"{op}:{','.join(args)}" for op, args in REFUSED.items()]


#: TensorIterator out= overloads whose iterator ATen builds by hand (where_self_out), which the OpInfo probe does not
#: reach with CPU scalars alone: seen refused on an H100 (tests/integration/test_device_mismatch.py).
UNPROBED_OUT_OPS = ("where.self_out",)


def measured_out_ops() -> list[str]:
    """The out= overloads beside tensor_iterator_ops() that CUDA refuses CPU scalars alone as inputs to (abs.out,
    logical_not.out: TensorIterator operators the yaml does not mark structured), measured on a GPU."""
    from torch_fl.vocab.cpu_scalar_checks import OUT_NEEDS_A_DEVICE_INPUT

    return [*OUT_NEEDS_A_DEVICE_INPUT, *UNPROBED_OUT_OPS]
