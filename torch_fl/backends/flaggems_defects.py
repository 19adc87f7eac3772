"""Calls that FlagGems' own functions get wrong, caught before their kernels run.

A FlagGems function that faults the GPU (an illegal memory access) leaves the
CUDA context unusable: no fallback can recover, the process must end. One that
reads the wrong memory without faulting returns wrong values. Neither can be
told apart from a good call after the fact, so the calls such a function gets
wrong are named here, per function, and refused before it runs. A function is
matched by its source file under the flag_gems package and its name
(FlagGems imports its per-architecture ops as top-level modules, e.g.
`hopper.ops.mul`, so the module name says less than the file), and a release
that fixes it by moving or renaming it is no longer matched. The refusal,
FlagGemsDefect, is a KernelRefused: the route's error policy
(routing/policy.py) runs the call natively (an in-place or out= one too, as
nothing was written), counts a fallback, says why once in a warning, and runs
later calls of that dtype natively. In-place and out= pointwise calls whose
result type their output cannot hold are refused the same way, and the native
route raises PyTorch's error.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable

import torch

from torch_fl.backends.call_checks import fresh_results, pointwise_check
from torch_fl.vocab.errors import KernelRefused


class FlagGemsDefect(KernelRefused):
    """A call that a FlagGems function is known to get wrong (the message says which and why), refused before
    it runs."""


def _hopper_mul(a, b, *_, **__) -> str | None:
    """FlagGems 5.0.2's Hopper `mul`: for two real tensors of the same rank it runs a flat kernel over the
    first one's element count, reading the second at the same flat offsets and writing `empty_like(first)`:
    no broadcasting, strides or type promotion. Anything but two contiguous tensors of one shape and dtype
    reads outside the second tensor (Qwen3's `q * cos` in prefill faults the GPU) or computes wrong values."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.dim() != b.dim():
        return None  # its other branches are FlagGems' general pointwise kernels
    if a.is_complex() or b.is_complex():
        return None
    same = a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
    if same and a.is_contiguous() and b.is_contiguous():
        return None
    return (
        "FlagGems' Hopper mul treats two tensors of the same rank as flat arrays of one shape, dtype, device "
        f"and layout (got {tuple(a.shape)} {a.dtype} on {a.device} and {tuple(b.shape)} {b.dtype} on {b.device}, "
        f"contiguous: {a.is_contiguous()}/{b.is_contiguous()}); it would read outside its inputs"
    )


def _flat(what: str, name: str, floating: bool = False) -> Callable[..., str | None]:
    """A Hopper function that runs one flat kernel over the element count of its argument `name` (keyword
    `out`, else the first), ignoring its strides: anything but a contiguous tensor reads or writes the wrong
    elements; with `floating`, it also keeps an integer input's dtype where PyTorch promotes to float."""

    def check(*args, **kwargs) -> str | None:
        t = kwargs.get("out") if name == "out" else kwargs.get(name, args[0] if args else None)
        if not isinstance(t, torch.Tensor) or t.is_contiguous() and (not floating or t.is_floating_point()):
            return None
        return (
            f"FlagGems' Hopper {what} runs a flat kernel over its {name} (got {tuple(t.shape)} {t.dtype}, "
            f"strides {t.stride()}): only contiguous{' floating-point' if floating else ''} tensors reach it"
        )

    return check


# Triton's tl.atomic_add has 16-, 32- and 64-bit float and 32- and 64-bit integer forms only.
_NO_ATOMIC_ADD = (torch.bool, torch.uint8, torch.int8, torch.int16)


def _atomic_add(name: str):
    """FlagGems' index_add accumulates with Triton's tl.atomic_add, which Triton has for 16-, 32- and 64-bit
    floats and 32- and 64-bit integers only: for bool, 8- and 16-bit integers the kernel fails to compile."""

    def check(inp, *_, **__) -> str | None:
        if isinstance(inp, torch.Tensor) and inp.dtype in _NO_ATOMIC_ADD:
            return f"FlagGems' {name} accumulates with Triton's atomic_add, which has no {inp.dtype} form"
        return None

    return check


_INDEX_DTYPES = (torch.int64, torch.int32, torch.bool)


def _index_put(name: str):
    """FlagGems' index_put family checks neither what PyTorch's index_put_ does nor its own limits: it writes
    `values` of another dtype into `self` (PyTorch: "Index put requires the source and destination dtypes
    match"), takes an int8 index for a mask and a uint8 mask for indices, and with `accumulate` adds with
    Triton's atomic_add, which has no bool, 8- or 16-bit integer form (the kernel fails to compile)."""

    def check(inp, indices, values, accumulate=False, *_, **__) -> str | None:
        if not (isinstance(inp, torch.Tensor) and isinstance(values, torch.Tensor)):
            return None
        if values.dtype != inp.dtype:
            return f"FlagGems' {name} writes {values.dtype} values into {inp.dtype} without PyTorch's dtype check"
        for index in indices or ():
            if isinstance(index, torch.Tensor) and index.dtype not in _INDEX_DTYPES:
                return f"FlagGems' {name} reads a {index.dtype} index as PyTorch does not"
        if accumulate and inp.dtype in _NO_ATOMIC_ADD:
            return f"FlagGems' {name} accumulates with Triton's atomic_add, which has no {inp.dtype} form"
        return None

    return check


_HALF = (torch.float16, torch.bfloat16)


def _layer_norm(inp, *_, **__) -> str | None:
    """FlagGems 5.0.2's layer_norm returns the mean and rstd it saves for the backward in the input's dtype,
    where PyTorch keeps them in float32 for a float16 or bfloat16 input: PyTorch's backward would read them as
    float32, FlagGems' with the precision of a half."""
    if isinstance(inp, torch.Tensor) and inp.dtype in _HALF:
        return (
            f"FlagGems' layer_norm returns the mean and rstd of a {inp.dtype} input in {inp.dtype}, where "
            "PyTorch keeps them in float32 for the backward"
        )
    return None


def _layer_norm_backward(grad_out, inp, normalized_shape, *_, **__) -> str | None:
    """FlagGems 5.0.2's layer_norm_backward takes the input's first dimension for its number of rows: an input
    with more leading dimensions (a (batch, sequence, hidden) activation normalized over hidden) gets the wrong
    rows, and its weight and bias gradient kernel reads past the end of weight (GPT-2's and ViT's training
    steps faulted the GPU; BERT's got wrong gradients)."""
    if not isinstance(inp, torch.Tensor) or inp.numel() == 0:
        return None
    rows = inp.numel() // max(math.prod(normalized_shape), 1)
    if inp.dim() > 0 and inp.shape[0] == rows:
        return None
    return (
        f"FlagGems' layer_norm_backward takes {inp.shape[0] if inp.dim() else 1} rows for an input of shape "
        f"{tuple(inp.shape)} normalized over {tuple(normalized_shape)} ({rows} rows): it would read past the end "
        "of weight"
    )


def _layer_norm_stats(args: tuple, kwargs: dict, result):
    """FlagGems 5.0.2's layer_norm returns its mean and rstd flat, one per row; PyTorch's have the input's
    leading dimensions and a 1 for each normalized one (what its backward and autograd's checks expect). The
    same values, viewed so."""
    inp = args[0] if args else kwargs["input"]
    normalized = args[1] if len(args) > 1 else kwargs["normalized_shape"]
    y, mean, rstd = result
    shape = (*inp.shape[: inp.dim() - len(normalized)], *(1,) * len(normalized))
    return y, mean.view(shape), rstd.view(shape)


_HOPPER = "runtime/backend/_nvidia/hopper/ops/"

#: (source file under flag_gems/, function name) -> check(*args, **kwargs): None for a call the function
#: gets right, else why not
_DEFECTS: dict[tuple[str, str], Callable[..., str | None]] = {
    (_HOPPER + "mul.py", "mul"): _hopper_mul,
    (_HOPPER + "sqrt.py", "sqrt"): _flat("sqrt", "A", floating=True),
    (_HOPPER + "sqrt.py", "sqrt_"): _flat("sqrt_", "A", floating=True),
    (_HOPPER + "fill.py", "fill_scalar_"): _flat("fill_", "self"),
    (_HOPPER + "fill.py", "fill_tensor_"): _flat("fill_", "self"),
    (_HOPPER + "fill.py", "fill_scalar_out"): _flat("fill (out=)", "out"),
    (_HOPPER + "fill.py", "fill_tensor_out"): _flat("fill (out=)", "out"),
    ("ops/index_add.py", "index_add"): _atomic_add("index_add"),
    ("ops/index_add.py", "index_add_"): _atomic_add("index_add_"),
    ("ops/index_put.py", "index_put"): _index_put("index_put"),
    ("ops/index_put.py", "index_put_"): _index_put("index_put_"),
    ("ops/index_put.py", "_index_put_impl_"): _index_put("_index_put_impl_"),
    ("ops/layernorm.py", "layer_norm"): _layer_norm,
    ("ops/layernorm.py", "layer_norm_backward"): _layer_norm_backward,
}

#: (source file under flag_gems/, function name) -> fix(args, kwargs, result): results a function returns in
#: another form than PyTorch's, put in PyTorch's without computing anything again (a view)
_RESULT_FORMS: dict[tuple[str, str], Callable[[tuple, dict, object], object]] = {
    ("ops/layernorm.py", "layer_norm"): _layer_norm_stats,
}


def location(fn) -> tuple[str, str] | None:
    """(source file under the flag_gems package, function name) of a FlagGems function, else None."""
    filename = getattr(getattr(fn, "__code__", None), "co_filename", None)
    if not filename:
        return None
    path = filename.replace(os.sep, "/")
    at = path.rfind("flag_gems/")
    return None if at < 0 else (path[at + len("flag_gems/") :], getattr(fn, "__name__", ""))


def refusal(fn, *args, **kwargs) -> str | None:
    """Why the FlagGems function `fn` (as FlagGems defines it, or as `guarded` wraps it) gets this call wrong
    and is refused, else None."""
    check = _DEFECTS.get(location(getattr(fn, "__wrapped__", fn)))
    return None if check is None else check(*args, **kwargs)


def guarded(fn, op: str | None = None):
    """`fn` itself, or a wrapper that raises FlagGemsDefect for the calls it must not run (the checks run on
    the Python path and when replay records a signature; replays run only signatures that passed them):
    - the calls a function with a known defect gets wrong;
    - for a pointwise operator `op`, the calls PyTorch's kernels reject by their dtypes and FlagGems' do not
      all check: a bool `neg_`, an integer `x.mul_(float_tensor)` or a bool `b.clamp_(min=1)` would run where
      CUDA raises (call_checks.pointwise_check). The error policy then runs the native route, which raises
      PyTorch's error, writing nothing;
    - for an operator whose results are new tensors, a result the function left over an input's memory is
      copied (call_checks.fresh_results: FlagGems' `cat` of one tensor returns that tensor);
    - results a function returns in another form than PyTorch's are put in PyTorch's (_RESULT_FORMS: the flat
      mean and rstd of FlagGems' layer_norm). Replay records these views and copies with the call."""
    check = _DEFECTS.get(location(fn))
    form = _RESULT_FORMS.get(location(fn))
    cast = None if op is None else pointwise_check(op)
    fresh = None if op is None else fresh_results(op)
    if check is None and form is None and cast is None and fresh is None:
        return fn

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        why = None if check is None else check(*args, **kwargs)
        if why is None and cast is not None:
            why = cast(args, kwargs)
        if why is not None:
            raise FlagGemsDefect(why)
        result = fn(*args, **kwargs)
        if form is not None:
            result = form(args, kwargs, result)
        return result if fresh is None else fresh(args, kwargs, result)

    return checked
