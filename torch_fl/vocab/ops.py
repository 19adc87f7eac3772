"""Operator names: the ATen operator set, normalisation, suggestions, schema facts.

Operator names are ATen overload names as `torch.ops.aten` spells them, without
the `aten::` prefix: `add.Tensor`, `mm` (the default overload; `mm.default` is
accepted and means the same), `_softmax`. A bare name means the default
overload, exactly as in FEP 0025 files (`abs = flagos_python` routes
`aten::abs`, not `abs_`); use a glob (`abs*`) for more. Routing gives a
functional overload's rule to its out= overload too (`abs.out`, see
`out_overloads` and routing/rules.py's with_out_overloads).
"""

from __future__ import annotations

import difflib
import fnmatch
import functools

import torch

from torch_fl.vocab.dtypes import parse_dtype
from torch_fl.vocab.errors import RoutingError, shorten

GLOB_CHARS = frozenset("*?")


def normalize(op: str) -> str:
    """`aten::mm.default` -> `mm`; `add.Tensor` stays."""
    op = op.strip()
    if op.startswith("aten::"):
        op = op[6:]
    if op.endswith(".default"):
        op = op[: -len(".default")]
    return op


def split(op: str) -> tuple[str, str]:
    """`add.Tensor` -> ("add", "Tensor"); `mm` -> ("mm", "")."""
    name, _, overload = op.partition(".")
    return name, overload


def qualified(op: str) -> str:
    return "aten::" + op


def is_glob(pattern: str) -> bool:
    return any(c in GLOB_CHARS for c in pattern)


@functools.lru_cache(maxsize=1)
def aten_ops() -> frozenset[str]:
    """Every ATen operator overload known to this PyTorch, as `name[.overload]`."""
    return frozenset(n[6:] for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::"))


@functools.lru_cache(maxsize=1)
def _sorted_ops() -> tuple[str, ...]:
    return tuple(sorted(aten_ops()))


def is_known(op: str) -> bool:
    return op in aten_ops()


def matching(pattern: str) -> list[str]:
    """ATen operators a glob pattern (`*_backward`, `add.*`) matches, sorted."""
    return [op for op in _sorted_ops() if fnmatch.fnmatchcase(op, pattern)]


def closest(op: str, n: int = 3) -> list[str]:
    """The nearest ATen operator names, for 'did you mean' messages."""
    ops = _sorted_ops()
    # A name whose operator has overloads but no default one (`add`): its own overloads, before names that
    # merely look alike (`addr`).
    own = [o for o in ops if o.startswith(op + ".")]
    if own:
        return sorted(own, key=_overload_rank)[:n]
    found = difflib.get_close_matches(op, ops, n=n, cutoff=0.6)
    if not found:  # `Add.tensor`: case-folded
        lower = op.lower()
        found = [o for o in ops if o.lower() == lower][:n]
    return found


def _overload_rank(name: str) -> tuple:
    """The functional overloads first (add.Tensor, add.Scalar), then out= and the others, by name."""
    overload = name.partition(".")[2].lower()
    order = ("tensor", "scalar")
    return (order.index(overload) if overload in order else len(order) + ("out" in overload), name)


def unknown_op_message(op: str, suggest: bool = True) -> str:
    """The error for an unknown operator name; `suggest=False` skips the (slow, ~10 ms) nearest-name search."""
    hints = closest(op) if suggest else []
    did_you_mean = f" Did you mean {', '.join(hints)}?" if hints else ""
    return (
        f"unknown operator '{shorten(op)}': not an ATen operator overload of torch {torch.__version__}.{did_you_mean} "
        "Write the overload as torch.ops.aten names it (add.Tensor, mm, _softmax; a bare name is the default "
        "overload)."
    )


def schema(op: str):
    name, overload = split(op)
    return torch._C._get_schema(qualified(name), overload)


#: The schema types an argument condition (`pow.Tensor_Scalar[exponent=2]`) may test: numbers and booleans.
_CONDITION_TYPES = frozenset({"number", "int", "SymInt", "float", "bool"})  # as real_type names them


@functools.cache
def condition_arguments(op: str) -> dict[str, int]:
    """The arguments of `op` an argument condition may test (a number or boolean, optional or not): name -> their
    position among the schema's arguments (keyword-only ones included), as the core reads them from a call."""
    out = {}
    for i, a in enumerate(schema(op).arguments):
        t = str(a.real_type).removeprefix("Optional[").removesuffix("]")  # ScalarType is an int to a.type
        if t in _CONDITION_TYPES:
            out[a.name] = i
    return out


@functools.cache
def class_argument(op: str) -> tuple[str, int, object] | None:
    """The argument calibrate tells `op`'s calls apart by: its first Scalar (`pow.Tensor_Scalar`'s exponent,
    `add.Tensor`'s alpha), as (name, position, default); None for an operator without one."""
    for i, a in enumerate(schema(op).arguments):
        if str(a.real_type) in ("number", "Optional[number]"):
            return a.name, i, a.default_value
    return None


def condition_argument_problem(op: str, name: str) -> str | None:
    """Why `op[name=value]` cannot be a rule (no such argument, or one that is not a number), else None."""
    args = condition_arguments(op)
    if name in args:
        return None
    all_names = [a.name for a in schema(op).arguments]
    what = "is not a number or boolean" if name in all_names else "is not an argument of it"
    can = ", ".join(args) if args else "none: it takes no number or boolean"
    return f"'{shorten(name)}' {what} in aten::{op}'s schema; the arguments a condition can test: {can}"


def _holds_tensor(t) -> bool:
    return isinstance(t, torch._C.TensorType) or any(_holds_tensor(c) for c in t.containedTypes())


@functools.cache
def has_tensor_args(op: str) -> bool:
    """True when some argument of `op` is a tensor (Tensor, Tensor?, Tensor[], Tensor?[]). Calls are routed by
    their first tensor argument's dtype, so a dtype rule can select calls of these operators only."""
    return any(_holds_tensor(a.type) for a in schema(op).arguments)


def dtype_rule_problem(op: str, dtype_text: str, backend: str | None = None) -> str | None:
    """Why `op[dtype_text]` can never apply (`op` has no tensor argument), with what to write instead; else None."""
    if has_tensor_args(op):
        return None
    instead = f"'{op} = {backend}'" if backend else f"'{op}' without a dtype"
    return (
        f"'{op}[{shorten(dtype_text)}]' never applies: calls are routed by their first tensor argument's dtype and "
        f"aten::{op} has no tensor argument. Write {instead} to route it for every dtype."
    )


@functools.lru_cache(maxsize=1)
def _overloads_by_name() -> dict[str, tuple[str, ...]]:
    by_name: dict[str, list[str]] = {}
    for op in _sorted_ops():
        by_name.setdefault(split(op)[0], []).append(op)
    return {name: tuple(ops) for name, ops in by_name.items()}


def overloads_of(name: str) -> tuple[str, ...]:
    """Every overload of an operator name (`randn` -> randn, randn.generator, randn.out, ...), sorted."""
    return _overloads_by_name().get(name, ())


def _writes(arg) -> bool:
    return arg.alias_info is not None and arg.alias_info.is_write


@functools.cache
def out_overloads(op: str) -> tuple[str, ...]:
    """The out= overloads of a functional overload: those of its name whose arguments are `op`'s plus keyword-only
    tensors they write (mm -> mm.out, add.Tensor -> add.out, add.Scalar -> add.Scalar_out). Empty for an operator
    that writes an argument itself."""
    args = schema(op).arguments
    if any(_writes(a) for a in args):
        return ()
    want = [(a.name, str(a.type)) for a in args]
    found = []
    for other in overloads_of(split(op)[0]):
        other_args = schema(other).arguments
        outs = [a for a in other_args if _writes(a)]
        if (
            outs
            and all(a.kwarg_only for a in outs)
            and [(a.name, str(a.type)) for a in other_args if not _writes(a)] == want
        ):
            found.append(other)
    return tuple(found)


def is_mutable(op: str) -> bool:
    """True when the operator writes to one of its arguments (in-place or out=)."""
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema(op).arguments)


def makes_views(op: str) -> bool:
    """True when a result may view an input (an argument annotated Tensor(a) without '!'): transpose, expand..."""
    return any(a.alias_info is not None and not a.alias_info.is_write for a in schema(op).arguments)


def parse_op_key(op: str) -> tuple[str, torch.dtype | None]:
    """`mm`, `aten::mm.default`, `mm[bfloat16]` -> (normalised op, dtype); RoutingError for anything else."""
    if not isinstance(op, str):
        raise RoutingError(f"operator names are strings like 'add.Tensor', got {shorten(repr(op))}")
    text = op.strip()
    dtype = None
    if text.endswith("]") and "[" in text:
        text, _, dt = text[:-1].partition("[")
        if "," in dt or "=" in dt or ">" in dt:
            raise RoutingError(
                f"'{shorten(op)}': name one operator with at most one dtype (mm[bfloat16]); dtype lists and size "
                "conditions (mm[bfloat16, numel>=65536]) are written in a routing file"
            )
        try:
            dtype = parse_dtype(dt)
        except ValueError as e:
            raise RoutingError(str(e)) from None
    norm = normalize(text)
    if is_glob(norm):
        raise RoutingError(f"'{shorten(op)}': name one operator, not a glob; globs are written in a routing file")
    if not is_known(norm):
        raise RoutingError(unknown_op_message(norm))
    if dtype is not None:
        problem = dtype_rule_problem(norm, dt.strip())
        if problem:
            raise RoutingError(problem)
    return norm, dtype
