"""What the CPU leaves undefined, so the generator leaves it out: writes through overlapping elements or over
part of an input, _foreach calls whose tensors meet, float-to-integer casts of values out of range, and the
setitem paths the reference takes differently from flagos.
"""

from __future__ import annotations

import torch

import torch_fl
from tests.fuzz.env import Env, V, refs_in, storage_key
from tests.fuzz.steps import Func, Method, SetItem, Step


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def _int(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def cast_defined(src: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether converting `src`'s values to `dtype` is defined in C++ (float to integer: only values it holds)."""
    if not (is_float(src.dtype) and _int(dtype)) or src.numel() == 0:
        return True
    info = torch.iinfo(dtype)
    v = src.detach().double()
    return bool(torch.isfinite(v).all() and (v > float(info.min) - 1).all() and (v < float(info.max) + 1).all())


def footprint(t: torch.Tensor) -> torch.Tensor:
    """The storage bytes `t` covers (sorted, with repeats when elements overlap)."""
    if t.numel() == 0:
        return torch.empty(0, dtype=torch.int64)
    off = torch.tensor(t.storage_offset(), dtype=torch.int64)
    for size, stride in zip(t.shape, t.stride(), strict=True):
        off = off.unsqueeze(-1) + torch.arange(size, dtype=torch.int64) * stride
    isz = t.element_size()
    b = (off.reshape(-1, 1) * isz + torch.arange(isz, dtype=torch.int64)).reshape(-1)
    return b.sort().values


def overlap_undefined(written: list[torch.Tensor], read: list[torch.Tensor]) -> bool:
    """Whether a write to `written` has no defined result unless the kernel rejects it: a written tensor whose
    elements overlap each other or another written tensor, or that partially overlaps a tensor the step
    reads (a different geometry over some of the same bytes)."""
    for k, w in enumerate(written):
        fw = footprint(w)
        if fw.numel() and (fw[1:] == fw[:-1]).any():
            return True
        for other in written[k + 1 :]:  # two written tensors over the same bytes: the later write wins, or races
            if other.numel() and storage_key(other) == storage_key(w) and bool(torch.isin(footprint(other), fw).any()):
                return True
        for r in read:
            if r.numel() == 0 or storage_key(r) != storage_key(w):
                continue
            same = (r.dtype, r.shape, r.stride(), r.storage_offset()) == (
                w.dtype,
                w.shape,
                w.stride(),
                w.storage_offset(),
            )
            if not same and bool(torch.isin(footprint(r), fw).any()):
                return True
    return False


def is_foreach(step: Step) -> bool:
    return isinstance(step, Func) and step.name.startswith("_foreach_")


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    if not a.numel() or not b.numel() or storage_key(a) != storage_key(b):
        return False
    return bool(torch.isin(footprint(a), footprint(b)).any())


def foreach_undefined(step: Func, env: Env) -> bool:
    """Whether an in-place _foreach call's result depends on how it runs: the CPU goes pair by pair (a later
    pair reads an earlier pair's writes), a GPU in one kernel. Any written tensor that meets another tensor
    of the call (its own pair's input of the same geometry aside), or whose elements overlap, makes it so."""
    selves = [env.t[i] for i in refs_in(step.args[0])]
    others = [env.t[i] for i in refs_in(step.args[1])] if len(step.args) > 1 and isinstance(step.args[1], list) else []
    tensors = [("self", k, t) for k, t in enumerate(selves)] + [("other", k, t) for k, t in enumerate(others)]
    for k, w in enumerate(selves):
        fw = footprint(w)
        if fw.numel() and (fw[1:] == fw[:-1]).any():
            return True
        for kind, j, t in tensors:
            if j == k and (kind == "self" or _geometry(t) == _geometry(w)):
                continue
            if _overlap(w, t):
                return True
    return False


def _geometry(t: torch.Tensor) -> tuple:
    return (storage_key(t), t.dtype, tuple(t.shape), t.stride(), t.storage_offset())


def fill_path(step: Step, env: Env) -> bool:
    """`t[key] = v` with a 0-dim tensor v: Python's setitem fills from a CPU one and copies from any other,
    and the two check overlapping elements differently. On the reference every tensor is a CPU one."""
    if not isinstance(step, SetItem) or not isinstance(step.value, V):
        return False
    return env.t[step.value.i].dim() == 0 and env.dev[step.value.i] != "cpu"


def cpu_values_put(step: Step, env: Env) -> bool:
    """`t[index_tensor] = v` on a flagos t with a CPU v of more than 0 dims: CUDA's index_put_ takes a CPU value
    only 0-dim and raises "Expected all tensors to be on the same device" otherwise, as flagos does; on the
    reference every tensor is a CPU one, so the step has no CPU counterpart."""
    if not isinstance(step, SetItem) or not isinstance(step.value, V) or env.dev[step.on] == "cpu":
        return False
    advanced = any(isinstance(k, V) for k in step.key)
    return advanced and env.dev[step.value.i] == "cpu" and env.t[step.value.i].dim() > 0


def cuda_judges_cpu_tensor(step: Step, env: Env) -> bool:
    """On a CUDA backing, a call taking a flagos tensor and a CPU one (a copy_ aside): CUDA's own kernels decide
    by their device checks, which take a 0-dim CPU tensor in TensorIterator operators and refuse it in others
    (clamp_'s min, masked_fill_'s mask); the CPU reference cannot judge those. On host backing the check is
    flagos's own (route/device_check), and the step is kept."""
    if torch_fl.backing() != "cuda" or not isinstance(step, (Func, Method)) or step.name == "copy_":
        return False
    devs = {env.dev[i] for i in refs_in((step.args, step.kwargs)) if i in env.dev}
    if isinstance(step, Method):
        devs.add(env.dev[step.on])
    return "cpu" in devs and len(devs) > 1
