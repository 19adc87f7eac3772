"""PyTorch's own checks of a call, made without running it.

A backend kernel of another project (FlagGems) may accept calls that PyTorch's kernels reject: a bool
`neg_`, or an in-place `mul_` whose result type cannot be cast to its integer `self`. pointwise_check makes
PyTorch's checks before FlagGems' pointwise kernels run (backends/flaggems_defects.py): the dtypes a call
brings, judged once per dtype signature by PyTorch's meta kernel on one-element tensors, and the result
cast, which the CPU and CUDA kernels check but the meta kernels do not (`aten::mul_` on meta accepts
int64 * float), made with PyTorch's own type promotion. The meta kernels carry PyTorch's other checks
(shapes, out= types) and read or write nothing: the error policy (routing/policy.py) asks them whether a
call that raised on a backend was the caller's mistake. fresh_results makes a call's results new tensors
where PyTorch's are: a backend kernel may hand back an input itself.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes, suggest_memory_format

from torch_fl.vocab import ops


def _packet(op: str):
    """The aten overload packet of `op` ("add.Tensor", "mm"), or None where aten has no such overload."""
    name, overload = ops.split(op)
    return getattr(getattr(torch.ops.aten, name, None), overload or "default", None)


def on_meta(a):
    """`a` with every tensor replaced by a meta tensor of the same geometry and dtype."""
    if isinstance(a, torch.Tensor):
        return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
    if isinstance(a, (list, tuple)):
        return type(a)(on_meta(x) for x in a)
    return a


def _unseen():
    """A scope whose operators no TorchDispatchMode sees: the checks' meta calls are torch_fl's own work, not the
    call's (replay's recorder, a mode of the user's, would otherwise take them for the backend function's)."""
    return torch._C._DisableTorchDispatch()


def rejected_by_meta(op: str, args, kwargs) -> bool:
    """True when PyTorch's own checks reject the call, run on meta tensors of the same geometry: nothing is
    read or written. False where they accept it or cannot tell (no meta kernel)."""
    fn = _packet(op)
    if fn is None:
        return False
    try:
        with _unseen():
            fn(*on_meta(args), **{k: on_meta(v) for k, v in kwargs.items()})
    except NotImplementedError:
        return False
    except Exception:  # noqa: BLE001  (any rejection counts: the native route would raise it too)
        return True
    return False


def _one_element(a):
    """`a` with every tensor replaced by a one-element meta tensor of its dtype and number of dimensions: what
    PyTorch's type checks of a pointwise operator see, with nothing to broadcast."""
    if isinstance(a, torch.Tensor):
        return torch.empty((1,) * a.dim(), dtype=a.dtype, device="meta")
    if isinstance(a, (list, tuple)):
        return type(a)(_one_element(x) for x in a)
    return a


def _signature(a):
    """What a pointwise call's dtype checks depend on: each tensor's dtype and whether it is 0-dim (a 0-dim
    tensor promotes as a scalar), and the type of every other argument."""
    if isinstance(a, torch.Tensor):
        return (a.dtype, a.dim() == 0)
    if isinstance(a, (list, tuple)):
        return tuple(_signature(x) for x in a)
    return type(a)


def _storages(a, into: set) -> set:
    """The data pointers of the storages of the tensors in `a` (nested lists too) with any bytes."""
    if isinstance(a, torch.Tensor):
        storage = a.untyped_storage()
        if storage.nbytes():
            into.add(storage.data_ptr())
    elif isinstance(a, (list, tuple)):
        for x in a:
            _storages(x, into)
    return into


def fresh_results(op: str) -> Callable[[tuple, dict, object], object] | None:
    """For an operator whose results are new tensors (its schema neither mutates nor aliases), a
    fix(args, kwargs, result) that hands back a copy of each result a backend's kernel left over an input's
    memory, as PyTorch's kernels never do (FlagGems' `cat` of one tensor returns that tensor: writing to the
    result wrote to the input); None for any other operator. The copy takes the layout PyTorch's kernels
    give a new tensor (contiguous, or channels-last for such an input)."""
    schema = getattr(_packet(op), "_schema", None)
    if schema is None or schema.is_mutable or not schema.returns:
        return None
    if any(r.alias_info is not None for r in schema.returns):
        return None

    def copied(r, inputs: set):
        if isinstance(r, torch.Tensor):
            storage = r.untyped_storage()
            if storage.nbytes() and storage.data_ptr() in inputs:
                return r.clone(memory_format=suggest_memory_format(r))
            return r
        if isinstance(r, (list, tuple)):
            return type(r)(copied(x, inputs) for x in r)
        return r

    def fix(args: tuple, kwargs: dict, result):
        inputs = _storages(kwargs.values(), _storages(args, set()))
        return copied(result, inputs) if inputs else result

    return fix


def pointwise_check(op: str) -> Callable[[tuple, dict], str | None] | None:
    """For a pointwise operator, a check(args, kwargs) giving PyTorch's error for a call it rejects by its
    dtypes (a bool `neg_`; the meta kernel's verdict, once per dtype signature) or, where the result goes to
    `self` (in-place) or `out`, by a promoted type that tensor cannot hold (`int64.mul_(float)`), else None;
    None for any other operator. Made once per operator: a call pays a signature lookup and the promotion."""
    packet = _packet(op)
    if packet is None or torch.Tag.pointwise not in packet.tags:
        return None
    in_place = ops.split(op)[0].endswith("_")
    verdicts: dict = {}

    def by_dtypes(args: tuple, kwargs: dict) -> str | None:
        key = (_signature(args), tuple((k, _signature(v)) for k, v in kwargs.items()))
        if key not in verdicts:
            try:
                with warnings.catch_warnings(), _unseen():  # an out= of another rank is resized: not the call's
                    warnings.simplefilter("ignore")
                    packet(*_one_element(args), **{k: _one_element(v) for k, v in kwargs.items()})
                verdicts[key] = None
            except NotImplementedError:
                verdicts[key] = None  # no meta kernel: the backend's kernel decides
            except Exception as e:  # noqa: BLE001  (PyTorch's own rejection, which CUDA's kernel raises too)
                verdicts[key] = str(e).split("\n", 1)[0]
        return verdicts[key]

    def check(args: tuple, kwargs: dict) -> str | None:
        why = by_dtypes(args, kwargs)
        if why is not None:
            return why
        out = kwargs.get("out")
        if isinstance(out, torch.Tensor):
            inputs = [*args, *(v for k, v in kwargs.items() if k != "out")]
        elif in_place and args and isinstance(args[0], torch.Tensor):
            out, inputs = args[0], [*args, *kwargs.values()]
        else:
            return None
        operands = [a for a in inputs if isinstance(a, (torch.Tensor, bool, int, float, complex))]
        try:
            _, result = elementwise_dtypes(*operands, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        except Exception:  # noqa: BLE001  (operands PyTorch's promotion does not take: the kernel decides)
            return None
        if torch.can_cast(result, out.dtype):
            return None
        return f"result type {result} can't be cast to the desired output type {out.dtype}"

    return check
