"""Random short tensor programs for the differential fuzzer (tests/fuzz/test_differential.py).

A program is a list of steps, each a small frozen dataclass whose repr is the Python that builds it, so a
failing program prints as a list you can paste back into `check([...])` and shrink by deleting lines. Every
step also renders as the torch line it runs (`listing(program)`). Tensors live in numbered variables
(`t0`, `t1`, ...); a step reads variables through `V(i)` markers and may bind one (`out=`).

Devices are logical: `d0`, `d1` (flagos:0, flagos:1), `cpu` and `cur` (the current flagos device, as
`torch.device("flagos")`). The reference run maps every one of them to the CPU; a move between two
different logical devices copies there, as it does on flagos, so storage sharing means the same in both
runs. Routes (`Route`) and `SetDevice` only act on flagos.

Programs are made by `generate(seed, ...)`, which runs each candidate step on the reference (the CPU) to
choose arguments that fit the tensors at hand and drops steps whose CPU result is not defined: writes
through a tensor whose elements overlap each other, or that partially overlap an input or another written
tensor, that the CPU does not reject; _foreach calls whose tensors meet or that raise (the CPU runs them
pair by pair); float-to-integer conversions of values the integer type cannot hold. Any other step that
raises on the CPU is kept: flagos must raise the same exception type. Routes are added afterwards, before
steps that call the routed operator (they change nothing on the CPU).

`run(program, flagos=...)` executes a program and returns one `Record` per step (outcome, the result's
dtype/shape/device, strides and storage offset; which variables share a storage; whose version counters
changed; every variable's value).
`difference(want, got)` names the first step where two runs differ; `known(...)` says whether that is one
of the KNOWN issues (each with its strict-xfail regression test); `check(program)` raises with the program
and its difference; `shrink(program)` deletes steps while a difference remains.

`python -m tests.fuzz.programs SEED [--shrink]` prints a seed's program and what differs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import random
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# ----------------------------------------------------------------------------------------------- markers


@dataclass(frozen=True)
class V:
    """Variable `t{i}` as an argument."""

    i: int

    def __repr__(self) -> str:
        return f"V({self.i})"


@dataclass(frozen=True)
class DT:
    """A dtype by name (`DT('float32')` is torch.float32)."""

    name: str

    def __repr__(self) -> str:
        return f"DT({self.name!r})"


@dataclass(frozen=True)
class Dev:
    """A logical device: d0, d1, cpu, cur."""

    name: str

    def __repr__(self) -> str:
        return f"Dev({self.name!r})"


@dataclass(frozen=True)
class MF:
    """A memory format by name (`MF('contiguous_format')`)."""

    name: str

    def __repr__(self) -> str:
        return f"MF({self.name!r})"


DEV_CODE = {"d0": "D0", "d1": "D1", "cpu": "CPU", "cur": "CUR"}
#: what the rendered code's device names stand for on flagos
PRELUDE = (
    "import torch, torch_fl\n"
    "from torch_fl import routing\n"
    "from tests.fuzz.programs import ints\n"
    "D0, D1, CPU, CUR = torch.device('flagos', 0), torch.device('flagos', 1), torch.device('cpu'), "
    "torch.device('flagos')"
)


def fmt(x: Any) -> str:
    """`x` (an argument) as the Python of the rendered program."""
    if isinstance(x, V):
        return f"t{x.i}"
    if isinstance(x, (DT, MF)):
        return f"torch.{x.name}"
    if isinstance(x, Dev):
        return DEV_CODE[x.name]
    if x is Ellipsis:
        return "..."
    if isinstance(x, slice):
        parts = ["" if p is None else str(p) for p in (x.start, x.stop, x.step)]
        return ":".join(parts[:2]) + (f":{parts[2]}" if x.step is not None else "")
    if isinstance(x, tuple):
        return "(" + ", ".join(fmt(a) for a in x) + ("," if len(x) == 1 else "") + ")"
    if isinstance(x, list):
        return "[" + ", ".join(fmt(a) for a in x) + "]"
    return repr(x)


def _args(args: tuple, kwargs: dict) -> str:
    return ", ".join([fmt(a) for a in args] + [f"{k}={fmt(v)}" for k, v in kwargs.items()])


def _refs(x: Any) -> list[int]:
    if isinstance(x, V):
        return [x.i]
    if isinstance(x, (list, tuple)):
        return [i for a in x for i in _refs(a)]
    if isinstance(x, dict):
        return [i for a in x.values() for i in _refs(a)]
    return []


def _first_dev(x: Any) -> Any:
    if isinstance(x, (V, Dev)):
        return x
    if isinstance(x, (list, tuple)):
        for a in x:
            d = _first_dev(a)
            if d is not None:
                return d
    return None


def ints(shape, dtype, seed: int) -> torch.Tensor:
    """Small integers (exact in every dtype) on the CPU: 0/1 for bool, 0..5 for uint8, -4..4 otherwise."""
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    lo, hi = (0, 2) if dtype == torch.bool else (0, 6) if dtype == torch.uint8 else (-4, 5)
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, tuple(shape), generator=g).to(dtype)


# ----------------------------------------------------------------------------------------------- environment


class Env:
    """Variables of a run: tensors, their logical devices, the current flagos device, routes set."""

    def __init__(self, flagos: bool):
        self.flagos = flagos
        self.t: dict[int, torch.Tensor] = {}
        self.dev: dict[int, str] = {}
        self.current = 0
        self.routed: set[str] = set()
        self.inference = None  # the torch.inference_mode() entered by an InferenceMode step
        if flagos:
            self.saved_device = torch.flagos.current_device()
            torch.flagos.set_device(0)

    def logical(self, name: str) -> str:
        return f"d{self.current}" if name == "cur" else name

    def device(self, name: str) -> torch.device:
        if not self.flagos or name == "cpu":
            return torch.device("cpu")
        return torch.device("flagos") if name == "cur" else torch.device("flagos", int(name[1]))

    def value(self, x: Any) -> Any:
        if isinstance(x, V):
            return self.t[x.i]
        if isinstance(x, (DT, MF)):
            return getattr(torch, x.name)
        if isinstance(x, Dev):
            return self.device(x.name)
        if isinstance(x, tuple):
            return tuple(self.value(a) for a in x)
        if isinstance(x, list):
            return [self.value(a) for a in x]
        return x

    def dev_of(self, x: Any) -> str:
        """Logical device of a result whose device comes from `x` (a V or a Dev)."""
        if isinstance(x, V):
            return self.dev[x.i]
        if isinstance(x, Dev):
            return self.logical(x.name)
        return "cpu"

    def close(self) -> None:
        if self.inference is not None:
            self.inference.__exit__(None, None, None)
            self.inference = None
        if self.flagos:
            from torch_fl import routing

            for op in sorted(self.routed):
                routing.clear_route(op)
            self.routed.clear()
            torch.flagos.set_device(self.saved_device)


def logical_device(t: torch.Tensor) -> str:
    return "cpu" if t.device.type == "cpu" else f"d{t.device.index}"


# ----------------------------------------------------------------------------------------------- steps

#: operators whose result's strides PyTorch specifies (views, and copies that preserve the input's layout)
VIEWS = frozenset(
    "view reshape transpose permute expand as_strided unfold narrow select diagonal unsqueeze squeeze "
    "flatten t movedim".split()
)
STRIDED = VIEWS | {
    "to",
    "clone",
    "contiguous",
    "zeros_like",
    "ones_like",
    "full_like",
    "float",
    "half",
    "bfloat16",
    "int",
    "long",
    "bool",
    "double",
    "byte",
}


@dataclass(frozen=True, repr=False)
class Step:
    """One line of a program."""

    def refs(self) -> list[int]:
        """The variables the step reads (`on` and every V among its arguments)."""
        on = [self.on] if hasattr(self, "on") else []
        return on + _refs([getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("out", "on")])

    def run(self, env: Env) -> Any:
        raise NotImplementedError

    def line(self) -> str:
        raise NotImplementedError

    def result_dev(self, env: Env) -> str:
        return "cpu"

    def strided(self) -> bool:
        """Whether PyTorch fixes the result's strides (compared when it does)."""
        return False

    def written(self, env: Env) -> list[torch.Tensor]:
        """The tensors this step writes (for the generator's overlap checks)."""
        return []

    def read(self, env: Env) -> list[torch.Tensor]:
        return [env.t[i] for i in self.refs() if i in env.t]

    def bind(self, code: str) -> str:
        out = getattr(self, "out", None)
        return code if out is None else f"t{out} = {code}"

    def __repr__(self) -> str:
        parts = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            default = f.default if f.default is not dataclasses.MISSING else None
            if f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            if (
                f.name != "out"
                and v == default
                and (f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING)
            ):
                continue
            parts.append(f"{f.name}={v!r}")
        return f"{type(self).__name__}({', '.join(parts)})"


@dataclass(frozen=True, repr=False)
class New(Step):
    """`ints(shape, dtype, seed)` moved to `dev`."""

    out: int
    shape: tuple
    dtype: str
    dev: str
    seed: int

    def run(self, env):
        return ints(self.shape, self.dtype, self.seed).to(env.device(self.dev))

    def line(self):
        return self.bind(f"ints({fmt(self.shape)}, torch.{self.dtype}, seed={self.seed}).to({DEV_CODE[self.dev]})")

    def result_dev(self, env):
        return env.logical(self.dev)


@dataclass(frozen=True, repr=False)
class Func(Step):
    """`torch.name(*args, **kwargs)`."""

    out: int | None
    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def run(self, env):
        return getattr(torch, self.name)(*env.value(self.args), **{k: env.value(v) for k, v in self.kwargs.items()})

    def line(self):
        return self.bind(f"torch.{self.name}({_args(self.args, self.kwargs)})")

    def result_dev(self, env):
        if "out" in self.kwargs:
            return env.dev_of(self.kwargs["out"])
        if "device" in self.kwargs:
            return env.dev_of(self.kwargs["device"])
        return env.dev_of(_first_dev(self.args))

    def strided(self):
        return self.name in STRIDED

    def written(self, env):
        if "out" in self.kwargs:
            return [env.value(self.kwargs["out"])]
        if self.name.endswith("_"):  # torch._foreach_add_(selves, ...)
            return [env.t[i] for i in _refs(self.args[0])]
        return []

    def read(self, env):
        return [env.t[i] for i in _refs(self.args) if i in env.t]


@dataclass(frozen=True, repr=False)
class Method(Step):
    """`t{on}.name(*args, **kwargs)`."""

    out: int | None
    on: int
    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def run(self, env):
        fn = getattr(env.t[self.on], self.name)
        return fn(*env.value(self.args), **{k: env.value(v) for k, v in self.kwargs.items()})

    def line(self):
        if self.name == "__getitem__":
            return self.bind(f"t{self.on}[{fmt(self.args[0])[1:-1].rstrip(',')}]")
        return self.bind(f"t{self.on}.{self.name}({_args(self.args, self.kwargs)})")

    def result_dev(self, env):
        return env.dev_of(self.kwargs["device"]) if "device" in self.kwargs else env.dev[self.on]

    def strided(self):
        return self.name in STRIDED

    def written(self, env):
        return [env.t[self.on]] if self.name.endswith("_") and not self.name.startswith("__") else []

    def read(self, env):
        return [env.t[i] for i in _refs((self.args, self.kwargs)) if i in env.t]


@dataclass(frozen=True, repr=False)
class Slice(Step):
    """`t{on}[:, ..., start:stop:step]` (the slice at `dim`)."""

    out: int
    on: int
    dim: int
    start: int | None
    stop: int | None
    step: int | None = None

    def key(self):
        return (slice(None),) * self.dim + (slice(self.start, self.stop, self.step),)

    def run(self, env):
        return env.t[self.on][self.key()]

    def line(self):
        return self.bind(f"t{self.on}[{fmt(self.key())[1:-1].rstrip(',')}]")

    def result_dev(self, env):
        return env.dev[self.on]

    def strided(self):
        return True


@dataclass(frozen=True, repr=False)
class SetItem(Step):
    """`t{on}[key] = value` (key: ints, slices, V index tensors; value: a scalar or a V)."""

    on: int
    key: tuple
    value: Any

    def run(self, env):
        env.t[self.on][env.value(self.key)] = env.value(self.value)

    def line(self):
        return f"t{self.on}[{fmt(self.key)[1:-1].rstrip(',')}] = {fmt(self.value)}"

    def written(self, env):
        basic = all(not isinstance(k, V) for k in self.key)
        return [env.t[self.on][env.value(self.key)] if basic else env.t[self.on]]

    def read(self, env):
        return [env.t[i] for i in _refs(self.value) if i in env.t]


@dataclass(frozen=True, repr=False)
class Move(Step):
    """`t{on}.to(dev[, dtype][, copy=True])`; on the reference, a move to another logical device copies."""

    out: int
    on: int
    dev: str
    dtype: str | None = None
    copy: bool = False

    def run(self, env):
        args = (env.device(self.dev),) + ((getattr(torch, self.dtype),) if self.dtype else ())
        copy = self.copy or (not env.flagos and env.dev[self.on] != env.logical(self.dev))
        return env.t[self.on].to(*args, copy=copy)

    def line(self):
        extra = (f", torch.{self.dtype}" if self.dtype else "") + (", copy=True" if self.copy else "")
        return self.bind(f"t{self.on}.to({DEV_CODE[self.dev]}{extra})")

    def result_dev(self, env):
        return env.logical(self.dev)

    def strided(self):
        return True


@dataclass(frozen=True, repr=False)
class ToLike(Step):
    """`t{on}.to(t{like})`: to that tensor's device and dtype; on the reference, to another logical device copies."""

    out: int
    on: int
    like: int

    def refs(self):
        return [self.on, self.like]

    def run(self, env):
        copy = not env.flagos and env.dev[self.on] != env.dev[self.like]
        return env.t[self.on].to(env.t[self.like], copy=copy)

    def line(self):
        return self.bind(f"t{self.on}.to(t{self.like})")

    def result_dev(self, env):
        return env.dev[self.like]

    def strided(self):
        return True


@dataclass(frozen=True, repr=False)
class Route(Step):
    """`routing.set_route(op, backend)` (flagos only)."""

    op: str
    backend: str

    def run(self, env):
        if env.flagos:
            from torch_fl import routing

            routing.set_route(self.op, self.backend)
            env.routed.add(self.op)

    def line(self):
        return f"routing.set_route({self.op!r}, {self.backend!r})"


@dataclass(frozen=True, repr=False)
class SetDevice(Step):
    """`torch.flagos.set_device(index)` (the reference only notes the current device)."""

    index: int

    def run(self, env):
        env.current = self.index
        if env.flagos:
            torch.flagos.set_device(self.index)

    def line(self):
        return f"torch.flagos.set_device({self.index})"


@dataclass(frozen=True, repr=False)
class InferenceMode(Step):
    """Enters torch.inference_mode() for the steps after it (`enabled`), or leaves it."""

    enabled: bool

    def run(self, env):
        if self.enabled and env.inference is None:
            env.inference = torch.inference_mode()
            env.inference.__enter__()
        elif not self.enabled and env.inference is not None:
            env.inference.__exit__(None, None, None)
            env.inference = None

    def line(self):
        return "mode = torch.inference_mode(); mode.__enter__()" if self.enabled else "mode.__exit__(None, None, None)"


@dataclass(frozen=True, repr=False)
class Observe(Step):
    """Reads `t{on}`'s strides, storage offset and contiguity (compared)."""

    on: int

    def run(self, env):
        t = env.t[self.on]
        return (t.stride(), t.storage_offset(), t.is_contiguous())

    def line(self):
        return f"(t{self.on}.stride(), t{self.on}.storage_offset(), t{self.on}.is_contiguous())"


# ----------------------------------------------------------------------------------------------- running


@dataclass
class Record:
    """What one step did: its outcome, its result, storage sharing and every variable afterwards."""

    outcome: str  # "ok", "skipped" (an input is undefined) or "raised <ExceptionType>"
    message: str = ""
    result: tuple | None = None  # (dtype, shape, logical device) of the variable bound, or what Observe read
    strides: tuple | None = None  # the bound variable's (strides, storage offset)
    observed: bool = False  # PyTorch fixes those strides (a view, a layout-preserving copy): always compared
    sharing: frozenset = frozenset()  # groups (>1) of variables over one storage
    values: dict = field(default_factory=dict)  # var -> (logical device, CPU copy)
    bumped: frozenset = frozenset()  # variables whose version counter the step changed (what autograd checks)
    calls: frozenset = frozenset()  # the aten overloads the step called (reference runs with calls=True)
    call_dtypes: dict = field(default_factory=dict)  # and the dtype of each one's first tensor argument


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def execute(step: Step, env: Env) -> Any:
    """Run `step`, binding its result; raises what the step raises."""
    r = step.run(env)
    out = getattr(step, "out", None)
    if out is not None:
        env.t[out] = r
        env.dev[out] = logical_device(r) if env.flagos else step.result_dev(env)
    return r


def _record(step: Step, env: Env, r: Any, snapshot: bool) -> Record:
    out = getattr(step, "out", None)
    if out is None and isinstance(step, Func) and isinstance(step.kwargs.get("out"), V):
        out = step.kwargs["out"].i  # an out= call's result is its out= tensor, bound or not
    result = strides = None
    if out is not None:
        t = env.t[out]
        # whether autograd sees a view: where PyTorch says (views, layout-keeping copies); elsewhere a kernel's
        # detail (the CPU's stack of inference tensors returns a view of its cat, CUDA's does not)
        result = (
            str(t.dtype),
            tuple(t.shape),
            env.dev[out],
            t.is_inference(),
            t._is_view() if step.strided() else None,
        )
        strides = (t.stride(), t.storage_offset())
    elif isinstance(step, Observe):
        result = r
    groups: dict[int, set[int]] = {}
    for i, t in env.t.items():
        groups.setdefault(_storage_key(t), set()).add(i)
    sharing = frozenset(frozenset(g) for g in groups.values() if len(g) > 1)
    values = {i: (env.dev[i], t.detach().to("cpu", copy=True)) for i, t in env.t.items()} if snapshot else {}
    return Record("ok", "", result, strides, step.strided(), sharing, values)


def run(program: list[Step], flagos: bool, snapshot_every_step: bool = True, calls: bool = False) -> list[Record]:
    """Run `program` on flagos (or on the CPU, the reference); one Record per step (with the aten overloads
    each step calls if `calls`: only on the CPU, where a dispatch mode changes nothing under test)."""
    env = Env(flagos)
    records = []
    versions: dict[int, int | None] = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for k, step in enumerate(program):
                last = k == len(program) - 1
                if any(i not in env.t for i in step.refs()):
                    records.append(Record("skipped"))
                    continue
                called: set[str] = set()
                dtypes: dict[str, str] = {}
                try:
                    mode = _Ops(called, dtypes) if calls and not isinstance(step, InferenceMode) else None
                    with mode or contextlib.nullcontext():
                        r = execute(step, env)
                except Exception as e:  # noqa: BLE001  (an outcome to compare)
                    out = getattr(step, "out", None)
                    env.t.pop(out, None)
                    rec = _record(Step(), env, None, snapshot_every_step or last)
                    rec.outcome, rec.message = f"raised {type(e).__name__}", (str(e).splitlines() or [""])[0]
                else:
                    rec = _record(step, env, r, snapshot_every_step or last)
                rec.calls, rec.call_dtypes = frozenset(called), dtypes
                now = {i: _version(t) for i, t in env.t.items()}
                rec.bumped = frozenset(i for i, v in now.items() if i in versions and v != versions[i])
                versions = now
                records.append(rec)
    finally:
        env.close()
    return records


def _version(t: torch.Tensor) -> int | None:
    return None if t.is_inference() else t._version


def _values_differ(want: torch.Tensor, got: torch.Tensor) -> str | None:
    if want.dtype != got.dtype or want.shape != got.shape:
        return f"{got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if want.is_floating_point() or want.is_complex():
        try:
            torch.testing.assert_close(got, want, equal_nan=True)
        except AssertionError as e:
            return f"values {got.tolist()}, expected {want.tolist()} ({str(e).splitlines()[0]})"
        return None
    if not torch.equal(got, want):
        return f"values {got.tolist()}, expected {want.tolist()}"
    return None


@dataclass(frozen=True)
class Diff:
    """The first difference between two runs: at step `step`, of `kind` (outcome, result, strides, sharing,
    variables, device, values), described by `text`."""

    step: int
    kind: str
    text: str

    def __str__(self) -> str:
        return self.text


def difference(
    want: list[Record], got: list[Record], program: list[Step] | None = None, all_strides: bool = True
) -> Diff | None:
    """The first step where the runs differ; None when they agree. Strides are compared for every bound
    result with `all_strides` (where flagos runs the CPU's own kernels), else where PyTorch fixes them."""
    for k, (w, g) in enumerate(zip(want, got, strict=True)):
        where = f"step {k}" + (f" `{program[k].line()}`" if program is not None else "")

        def diff(kind: str, text: str, k=k, where=where) -> Diff:
            return Diff(k, kind, f"{where}: {text}")

        if w.outcome != g.outcome:
            ws = w.outcome + (f" ({w.message})" if w.message else "")
            gs = g.outcome + (f" ({g.message})" if g.message else "")
            return diff("outcome", f"flagos {gs}; the CPU {ws}")
        if w.result != g.result:
            return diff(
                "result", f"result {g.result} on flagos, {w.result} on the CPU (dtype, shape, device, inference, view)"
            )
        if w.strides != g.strides and (all_strides or w.observed):
            return diff("strides", f"(strides, storage offset) {g.strides} on flagos, {w.strides} on the CPU")
        if w.sharing != g.sharing:
            show = lambda s: sorted(sorted(f"t{i}" for i in grp) for grp in s)  # noqa: E731
            return diff("sharing", f"storage sharing {show(g.sharing)} on flagos, {show(w.sharing)} on the CPU")
        if w.bumped != g.bumped:
            show = lambda s: sorted(f"t{i}" for i in s)  # noqa: E731
            return diff(
                "versions", f"version counters of {show(g.bumped)} changed on flagos, {show(w.bumped)} on the CPU"
            )
        if set(w.values) != set(g.values):
            return diff("variables", f"variables {sorted(g.values)} on flagos, {sorted(w.values)} on the CPU")
        for i in sorted(w.values):
            (wd, wt), (gd, gt) = w.values[i], g.values[i]
            if wd != gd:
                return diff("device", f"t{i} on {gd} on flagos, {wd} on the CPU")
            d = _values_differ(wt, gt)
            if d is not None:
                return diff("values", f"t{i} {d}")
    return None


# ----------------------------------------------------------------------------------------------- known issues


@dataclass(frozen=True)
class Known:
    """A difference the fuzzer knows: `name`, the regression test that reproduces it (a strict xfail until
    it is fixed) and `matches(program, diff, want, got)`, which recognises it as a program's first
    difference (the reference run made with calls=True)."""

    name: str
    test: str
    matches: Callable[[list[Step], Diff, list[Record], list[Record]], bool]

    def __post_init__(self):
        # checked where an entry is made: the test it names exists and is a strict xfail
        import ast
        import pathlib

        path, name = self.test.split("::")
        tree = ast.parse(pathlib.Path(__file__).parents[2].joinpath(path).read_text())
        test = next((f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == name), None)
        assert test is not None, f"{self.test} does not exist"
        marks = [ast.unparse(d) for d in test.decorator_list]
        assert any("xfail" in m and "strict=True" in m for m in marks), f"{self.test} is not a strict xfail"


KNOWN: tuple[Known, ...] = ()  # none open


def known(program: list[Step], diff: Diff, want: list[Record], got: list[Record]) -> Known | None:
    """The known issue `diff` is, or None."""
    return next((k for k in KNOWN if k.matches(program, diff, want, got)), None)


def listing(program: list[Step]) -> str:
    """The program as the torch code it runs on flagos, one numbered line per step."""
    width = len(str(len(program)))
    return "\n".join(f"{step.line():<60}  # {k:>{width}}" for k, step in enumerate(program))


def pasteable(program: list[Step]) -> str:
    return "[\n" + "".join(f"    {step!r},\n" for step in program) + "]"


def compare(program: list[Step], all_strides: bool | None = None, skip_known: bool = False) -> Diff | None:
    """Run on the CPU and on flagos; the first difference, or None (`all_strides`: see difference(); by
    default where flagos is backed by host memory). With `skip_known`, a known issue counts as none."""
    if all_strides is None:
        import torch_fl

        all_strides = torch_fl.backing() == "cpu"
    want, got = run(program, flagos=False), run(program, flagos=True)
    d = difference(want, got, program, all_strides)
    if d is not None and skip_known and known(program, d, with_calls(program, want), got) is not None:
        return None
    return d


def with_calls(program: list[Step], want: list[Record]) -> list[Record]:
    """`want` (a reference run) with the aten overloads each step calls, from another run under a dispatch
    mode (which the compared run goes without: a mode is not transparent under inference_mode)."""
    for r, c in zip(want, run(program, flagos=False, snapshot_every_step=False, calls=True), strict=True):
        r.calls, r.call_dtypes = c.calls, c.call_dtypes
    return want


def report(program: list[Step], diff: str, seed: int | None = None) -> str:
    lines = []
    if seed is not None:
        lines.append(
            f"seed {seed}; reproduce: FUZZ_SEED={seed} FLAGOS_HOST_DEVICES=2 "
            "python -m pytest tests/fuzz/test_differential.py -k seed"
        )
    lines += [f"difference: {diff}", "program (torch code, on flagos):", PRELUDE, listing(program)]
    lines += ["as steps (paste into tests.fuzz.programs.check(...)):", pasteable(program)]
    return "\n".join(lines)


def check(program: list[Step], seed: int | None = None) -> None:
    """Raise AssertionError (with the program) when flagos and the CPU differ."""
    diff = compare(program)
    if diff is not None:
        raise AssertionError(report(program, diff, seed))


def shrink(program: list[Step], budget_s: float = 60.0, fails: Callable | None = None) -> list[Step]:
    """Delete steps while `fails(program)` holds (default: flagos and the CPU differ); steps reading deleted
    variables are skipped."""
    fails = fails or (lambda p: compare(p) is not None)
    deadline = time.monotonic() + budget_s
    prog = list(program)
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for k in reversed(range(len(prog))):
            if time.monotonic() > deadline:
                break
            cand = prog[:k] + prog[k + 1 :]
            if cand and fails(cand):
                prog = cand
                changed = True
    # drop steps that no longer run (an input deleted)
    ref = run(prog, flagos=False, snapshot_every_step=False)
    live = [s for s, r in zip(prog, ref, strict=True) if r.outcome != "skipped"]
    return live if fails(live) else prog


# ----------------------------------------------------------------------------------------------- generator

DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")
DTYPE_WEIGHTS = (6, 2, 2, 1, 4, 2, 1, 1, 2, 2)
SAME_SIZE = {
    "float32": ("int32",),
    "int32": ("float32",),
    "float16": ("bfloat16", "int16"),
    "bfloat16": ("float16", "int16"),
    "int16": ("float16", "bfloat16"),
    "int64": ("float64",),
    "float64": ("int64",),
    "uint8": ("int8",),
    "int8": ("uint8",),
    "bool": (),  # a byte view of a bool could store bytes other than 0 and 1: reading those is undefined
}
SCALARS = (0, 1, 2, -1, -2, 3, 0.5, 1.5, -0.5, True)
CAST_METHODS = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "int": "int32", "long": "int64"}
CAST_METHODS.update({"bool": "bool", "double": "float64", "byte": "uint8"})

#: aten overloads the generated steps call, routable to native or cpu_fallback (views run natively only)
ROUTABLE = (
    "add.Tensor",
    "add_.Tensor",
    "add.out",
    "sub.Tensor",
    "sub_.Tensor",
    "mul.Tensor",
    "mul_.Tensor",
    "mul.out",
    "clamp_",
    "clamp_.Tensor",
    "clamp",
    "clamp.out",
    "fill_.Scalar",
    "fill_.Tensor",
    "zero_",
    "neg",
    "neg_",
    "abs",
    "abs_",
    "index_add_",
    "index_copy_",
    "index_fill_.int_Scalar",
    "index_put_",
    "_index_put_impl_",
    "index.Tensor",
    "index_select",
    "index_select.out",
    "masked_fill_.Scalar",
    "cat",
    "cat.out",
    "stack",
    "clone",
    "sum.dim_IntList",
    "sum",
    "where.self",
    "gt.Tensor",
    "gt.Scalar",
    "eq.Tensor",
)


def _float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def _int(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def cast_defined(src: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether converting `src`'s values to `dtype` is defined in C++ (float to integer: only values it holds)."""
    if not (_float(src.dtype) and _int(dtype)) or src.numel() == 0:
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
            if (
                other.numel()
                and _storage_key(other) == _storage_key(w)
                and bool(torch.isin(footprint(other), fw).any())
            ):
                return True
        for r in read:
            if r.numel() == 0 or _storage_key(r) != _storage_key(w):
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


def _foreach(step: Step) -> bool:
    return isinstance(step, Func) and step.name.startswith("_foreach_")


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    if not a.numel() or not b.numel() or _storage_key(a) != _storage_key(b):
        return False
    return bool(torch.isin(footprint(a), footprint(b)).any())


def foreach_undefined(step: Func, env: Env) -> bool:
    """Whether an in-place _foreach call's result depends on how it runs: the CPU goes pair by pair (a later
    pair reads an earlier pair's writes), a GPU in one kernel. Any written tensor that meets another tensor
    of the call (its own pair's input of the same geometry aside), or whose elements overlap, makes it so."""
    selves = [env.t[i] for i in _refs(step.args[0])]
    others = [env.t[i] for i in _refs(step.args[1])] if len(step.args) > 1 and isinstance(step.args[1], list) else []
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
    return (_storage_key(t), t.dtype, tuple(t.shape), t.stride(), t.storage_offset())


def _fill_path(step: Step, env: Env) -> bool:
    """`t[key] = v` with a 0-dim tensor v: Python's setitem fills from a CPU one and copies from any other,
    and the two check overlapping elements differently. On the reference every tensor is a CPU one."""
    if not isinstance(step, SetItem) or not isinstance(step.value, V):
        return False
    return env.t[step.value.i].dim() == 0 and env.dev[step.value.i] != "cpu"


def _cpu_values_put(step: Step, env: Env) -> bool:
    """`t[index_tensor] = v` on a flagos t with a CPU v of more than 0 dims: CUDA's index_put_ takes a CPU value
    only 0-dim and raises "Expected all tensors to be on the same device" otherwise, as flagos does; on the
    reference every tensor is a CPU one, so the step has no CPU counterpart."""
    if not isinstance(step, SetItem) or not isinstance(step.value, V) or env.dev[step.on] == "cpu":
        return False
    advanced = any(isinstance(k, V) for k in step.key)
    return advanced and env.dev[step.value.i] == "cpu" and env.t[step.value.i].dim() > 0


class Generator:
    """Builds one program from `seed`, choosing arguments against the reference run as it goes."""

    def __init__(self, seed: int, devices=("d0", "d1", "cpu"), backends=("native", "cpu_fallback"), length=None):
        self.rng = random.Random(seed)
        self.devices = tuple(devices)
        self.flagos_devices = tuple(d for d in self.devices if d != "cpu")
        self.backends = tuple(backends)
        self.length = length if length is not None else self.rng.randint(4, 18)
        self.program: list[Step] = []
        self.env = Env(flagos=False)
        self.next_var = 0
        self.seeds = 0

    # -- bookkeeping

    def var(self) -> int:
        self.next_var += 1
        return self.next_var - 1

    def seed(self) -> int:
        self.seeds += 1
        return self.seeds

    def replay(self) -> None:
        self.env.close()
        self.env = Env(flagos=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for s in self.program:
                with contextlib.suppress(Exception):
                    execute(s, self.env)

    def add(self, step: Step) -> bool:
        """Run `step` on the reference and keep it, unless its CPU result is undefined (then it is dropped)."""
        env = self.env
        try:
            risky = overlap_undefined(step.written(env), step.read(env))
            # never kept: a _foreach call whose tensors meet, a write to overlapping elements that the
            # reference rejects on a path flagos does not take (0-dim CPU values fill_, others copy_), and
            # an index_put of CPU values, which CUDA and flagos refuse
            never = (
                (_foreach(step) and foreach_undefined(step, env))
                or (risky and _fill_path(step, env))
                or _cpu_values_put(step, env)
            )
        except Exception:  # noqa: BLE001  (e.g. a key that raises: the step raises when run)
            risky = never = False
        if never:
            return False
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                execute(step, env)
        except Exception:  # noqa: BLE001
            if _foreach(step):  # the CPU raises pair by pair: the pairs before stay written
                self.replay()
                return False
            self.program.append(step)
            return False
        if risky:
            self.replay()
            return False
        self.program.append(step)
        return True

    def pick(self, pred: Callable[[torch.Tensor], bool] = lambda t: True, dev: str | None = None) -> int | None:
        """A variable satisfying `pred` (on `dev`), the last few made three times as likely as older ones."""
        c = [i for i, t in self.env.t.items() if pred(t) and (dev is None or self.env.dev[i] == dev)]
        if not c:
            return None
        return self.rng.choices(c, [3 if i >= self.next_var - 4 else 1 for i in c])[0]

    def dtype(self) -> str:
        return self.rng.choices(DTYPES, DTYPE_WEIGHTS)[0]

    def device(self, cur: bool = False) -> str:
        """A logical device (`cur`, the current flagos device, too if `cur`)."""
        devs = self.devices + (("cur",) if cur and self.flagos_devices else ())
        return self.rng.choices(devs, [1 if d == "cpu" else 2 if d == "cur" else 4 for d in devs])[0]

    def shape(self) -> tuple:
        nd = self.rng.choices((0, 1, 2, 3), (1, 5, 8, 5))[0]
        shape = [0 if self.rng.random() < 0.03 else self.rng.randint(1, 5) for _ in range(nd)]
        if shape and self.rng.random() < 0.05:  # now and then one longer dimension: kernels' vectorised loops
            shape[self.rng.randrange(nd)] = self.rng.randint(9, 40)
        return tuple(shape)

    def scalar(self, t: torch.Tensor | None = None):
        s = self.rng.choice(SCALARS)
        if t is not None and t.dtype == torch.bool:
            return self.rng.choice((True, False))
        if t is not None and not _float(t.dtype) and isinstance(s, float) and self.rng.random() < 0.8:
            return int(s)
        return s

    def new(self, shape, dtype=None, dev=None) -> int:
        if isinstance(dtype, torch.dtype):
            dtype = str(dtype).removeprefix("torch.")
        v = self.var()
        self.add(New(v, tuple(shape), dtype or self.dtype(), dev or self.device(), self.seed()))
        return v

    def operand(self, like: torch.Tensor, dev: str, same_dtype: bool = False) -> V:
        """A tensor broadcastable to `like` on `dev`: an existing one, a CPU scalar tensor or a new one."""
        r = self.rng.random()
        ok = lambda t: _broadcasts(t.shape, like.shape) and (not same_dtype or t.dtype == like.dtype)  # noqa: E731
        if r < 0.5:
            i = self.pick(ok, dev)
            if i is not None:
                return V(i)
        if r < 0.6:
            return V(self.new((), like.dtype if same_dtype else self.dtype(), "cpu"))
        shape = list(like.shape)[self.rng.randint(0, like.dim()) if like.dim() else 0 :]
        shape = [1 if self.rng.random() < 0.25 else s for s in shape]
        return V(self.new(shape, like.dtype if same_dtype or self.rng.random() < 0.5 else self.dtype(), dev))

    def index(self, n: int, unique: bool = True, dev: str = "cpu", negative: bool = False) -> int:
        """A new int64 index tensor of values in [0, n) (some in [-n, 0) with `negative`, for the operators
        that take them; never out of range: on a GPU that is a device-side assert, not an exception)."""
        k = None
        if n == 0:
            vals = []
        elif unique:
            vals = self.rng.sample(range(n), self.rng.randint(1, n) if k is None else min(k, n))
        else:
            vals = [self.rng.randrange(n) for _ in range(self.rng.randint(1, 4) if k is None else k)]
        if negative and vals and self.rng.random() < 0.2:
            vals = [v - n if self.rng.random() < 0.5 else v for v in vals]  # negative indices
        v = self.var()
        self.add(Func(v, "tensor", (vals,), {"dtype": DT("int64"), "device": Dev(dev)}))
        return v

    # -- step kinds

    def gen_new(self):
        v, dev = self.var(), self.device(cur=True)
        r, shape, dt = self.rng.random(), self.shape(), self.dtype()
        if r < 0.7:
            self.add(New(v, shape, dt, dev, self.seed()))
        elif r < 0.85 and dt != "bool":
            n = 1
            for s in shape:
                n *= s
            start = self.rng.randint(-3, 3) if dt != "uint8" else 0
            self.add(Func(v, "arange", (start, start + n), {"dtype": DT(dt), "device": Dev(dev)}))
            w = self.var()
            self.add(Method(w, v, "reshape", (shape,)))
        else:
            self.add(Func(v, "full", (shape, self.scalar()), {"dtype": DT(dt), "device": Dev(dev)}))

    def gen_view(self):
        i = self.pick()
        if i is None:
            return self.gen_new()
        t, rng, out = self.env.t[i], self.rng, self.var()
        nd = t.dim()
        kinds = ["slice", "narrow", "select", "unfold"] if nd else []
        kinds += ["transpose", "permute", "diagonal"] if nd >= 2 else []
        kinds += ["expand", "as_strided", "view", "reshape", "unsqueeze", "view_dtype", "flatten", "squeeze", "movedim"]
        kind = rng.choice(kinds)
        dim = rng.randrange(nd) if nd else 0
        size = t.shape[dim] if nd else 1
        if kind == "slice":
            start = rng.choice((None, rng.randint(-size, size)))
            stop = rng.choice((None, rng.randint(-size, size + 1)))
            step = rng.choice((None, 1, 2, 2, 3)) if rng.random() > 0.02 else rng.choice((0, -1))
            step_ = Slice(out, i, dim, start, stop, step)
        elif kind == "narrow":
            start = rng.randint(0, size)
            step_ = Method(out, i, "narrow", (dim, start, rng.randint(0, size - start)))
        elif kind == "select":
            if size == 0:
                return None
            step_ = Method(out, i, "select", (dim, rng.randint(-size, size - 1)))
        elif kind == "unfold":
            step_ = Method(out, i, "unfold", (dim, rng.randint(min(1, size), max(size, 1)), rng.randint(1, 3)))
        elif kind == "transpose":
            step_ = Method(out, i, "transpose", tuple(rng.sample(range(-nd, nd), 2)))
        elif kind == "permute":
            perm = list(range(nd))
            rng.shuffle(perm)
            step_ = Method(out, i, "permute", (tuple(perm),))
        elif kind == "diagonal":
            d1, d2 = rng.sample(range(nd), 2)
            step_ = Method(out, i, "diagonal", (), {"offset": rng.randint(-1, 1), "dim1": d1, "dim2": d2})
        elif kind == "expand":
            shape = [rng.randint(1, 3) if s == 1 else (-1 if rng.random() < 0.3 else s) for s in t.shape]
            if rng.random() < 0.3:
                shape.insert(0, rng.randint(1, 3))
            step_ = Method(out, i, "expand", (tuple(shape),))
        elif kind == "as_strided":
            numel = t.untyped_storage().nbytes() // t.element_size()
            if numel == 0:
                return None
            sizes = [rng.randint(1, 4) for _ in range(rng.randint(1, 3))]
            strides = [rng.randint(0, 4) for _ in sizes]
            span = 1 + sum((s - 1) * st for s, st in zip(sizes, strides, strict=True))
            if span > numel:
                sizes, strides, span = [min(numel, 4)], [1], min(numel, 4)
            step_ = Method(out, i, "as_strided", (tuple(sizes), tuple(strides), rng.randint(0, numel - span)))
        elif kind in ("view", "reshape"):
            shape = _factor(t.numel(), rng)
            if shape and rng.random() < 0.3:
                shape[rng.randrange(len(shape))] = -1
            step_ = Method(out, i, kind, (tuple(shape),))
        elif kind == "unsqueeze":
            step_ = Method(out, i, "unsqueeze", (rng.randint(-nd - 1, nd),))
        elif kind == "flatten":
            step_ = Method(out, i, "flatten")
        elif kind == "squeeze":
            step_ = Method(out, i, "squeeze", (dim,) if nd and rng.random() < 0.5 else ())
        elif kind == "movedim":
            step_ = Method(out, i, "movedim", (dim, rng.randrange(nd) if nd else 0))
        else:  # view_dtype: of the same element size, or (a contiguous last dimension) of another
            same = SAME_SIZE[str(t.dtype).removeprefix("torch.")]
            if not same:
                return None
            other = [d for d in DTYPES if d != "bool" and getattr(torch, d).itemsize != t.element_size()]
            step_ = Method(out, i, "view", (DT(rng.choice(same if rng.random() < 0.6 else other)),))
        self.add(step_)

    def gen_inplace(self):
        i = self.pick()
        if i is None:
            return self.gen_new()
        t, rng, dev = self.env.t[i], self.rng, self.env.dev[i]
        out = self.var() if rng.random() < 0.15 else None  # in-place returns its self: an alias
        kind = rng.choice(
            ["add_", "sub_", "mul_", "clamp_", "copy_", "copy_", "fill_", "zero_", "index_add_", "index_copy_"]
            + ["index_fill_", "index_put_", "masked_fill_", "setitem", "setitem", "neg_", "abs_"]
        )
        nd = t.dim()
        dim = rng.randrange(nd) if nd else 0
        size = t.shape[dim] if nd else 1
        if kind in ("add_", "sub_", "mul_"):
            other = self.scalar(t) if rng.random() < 0.4 else self.operand(t, dev)
            kw = {"alpha": self.scalar(t)} if kind != "mul_" and rng.random() < 0.3 else {}
            step = Method(out, i, kind, (other,), kw)
        elif kind == "clamp_":
            if rng.random() < 0.7:
                lo = rng.choice((None, -2, -1, 0, 1))
                hi = rng.choice((None, 1, 2, 3)) if lo is not None else rng.choice((1, 2, 3))
                step = Method(out, i, "clamp_", (), {k: v for k, v in (("min", lo), ("max", hi)) if v is not None})
            else:
                step = Method(out, i, "clamp_", (), {"min": self.operand(t, dev, same_dtype=True)})
        elif kind == "copy_":
            src = self.operand(t, self.device())
            if not cast_defined(self.env.t[src.i], t.dtype):
                return None
            step = Method(out, i, "copy_", (src,))
        elif kind == "fill_":
            value = self.scalar(t) if rng.random() < 0.7 else V(self.new((), t.dtype, rng.choice((dev, "cpu"))))
            step = Method(out, i, "fill_", (value,))
        elif kind in ("zero_", "neg_", "abs_"):
            step = Method(out, i, kind)
        elif kind in ("index_add_", "index_copy_", "index_fill_"):
            if not nd:
                return None
            idx = self.index(size, unique=kind != "index_add_", dev=dev)
            k = self.env.t[idx].numel()
            if kind == "index_fill_":
                step = Method(out, i, kind, (dim, V(idx), self.scalar(t)))
            else:
                shape = list(t.shape)
                shape[dim] = k
                src = self.new(shape, t.dtype if rng.random() < 0.9 else None, dev)
                kw = {"alpha": self.scalar(t)} if kind == "index_add_" and rng.random() < 0.3 else {}
                step = Method(out, i, kind, (dim, V(idx), V(src)), kw)
        elif kind == "index_put_":
            if not nd:
                return None
            acc = rng.random() < 0.4
            idx = self.index(t.shape[0], unique=not acc, dev=dev, negative=True)
            k = self.env.t[idx].numel()
            values = self.new((k, *t.shape[1:]) if rng.random() < 0.6 else (), t.dtype, dev)
            step = Method(out, i, "index_put_", ((V(idx),), V(values)), {"accumulate": acc})
        elif kind == "masked_fill_":
            mask = self.operand(t, dev)
            m = self.env.t[mask.i]
            if m.dtype != torch.bool:
                mask = V(self.new(m.shape, "bool", self.env.dev[mask.i]))
            step = Method(out, i, "masked_fill_", (mask, self.scalar(t)))
        elif kind == "setitem":
            key = self._key(t, dev)
            if key is None:
                return None
            try:
                target = self.env.t[i][self.env.value(key)]
            except Exception:  # noqa: BLE001
                target = None
            if target is not None and rng.random() < 0.6:
                value = self.operand(target, rng.choice((dev, dev, "cpu")))
                if not cast_defined(self.env.t[value.i], t.dtype):
                    return None
            else:
                value = self.scalar(t)
            return self.add(SetItem(i, key, value))
        else:
            return None
        self.add(step)

    def _key(self, t: torch.Tensor, dev: str):
        rng, nd = self.rng, t.dim()
        if nd == 0:
            return (Ellipsis,) if rng.random() < 0.5 else None
        parts = []
        for d in range(rng.randint(1, nd)):
            n = t.shape[d]
            r = rng.random()
            if r < 0.3 and n:
                parts.append(rng.randint(-n, n - 1))
            elif r < 0.8 or not n:
                parts.append(slice(rng.choice((None, rng.randint(0, n))), None, rng.choice((None, 1, 2))))
            else:
                parts.append(V(self.index(n, dev=rng.choice((dev, dev, "cpu")), negative=True)))
                break  # one index tensor: unique, so the writes are defined
        return tuple(parts)

    def gen_out(self):
        i = self.pick()
        if i is None:
            return self.gen_new()
        t, rng, dev = self.env.t[i], self.rng, self.env.dev[i]
        kind = rng.choice(("add", "mul", "cat", "index_select", "clamp"))
        if kind in ("add", "mul"):
            args = (V(i), self.scalar(t) if rng.random() < 0.3 else self.operand(t, dev))
        elif kind == "cat":
            dim = rng.randrange(t.dim()) if t.dim() else 0
            if not t.dim():
                return None
            parts = [V(i)]
            for _ in range(rng.randint(0, 2)):
                shape = list(t.shape)
                shape[dim] = rng.randint(0, 3)
                parts.append(V(self.new(shape, t.dtype if rng.random() < 0.8 else None, dev)))
            args = (parts, dim)
        elif kind == "index_select":
            if not t.dim():
                return None
            dim = rng.randrange(t.dim())
            args = (V(i), dim, V(self.index(t.shape[dim], unique=False, dev=dev)))
        else:
            args = (V(i), rng.choice((None, -1, 0)), rng.choice((1, 2)))
        try:
            want = getattr(torch, kind)(*self.env.value(args))
        except Exception:  # noqa: BLE001
            return None
        r = rng.random()
        o = self.pick(lambda x: x.shape == want.shape, dev) if r < 0.6 else None
        if o is None:
            o = self.var()
            self.add(
                Func(
                    o,
                    "empty",
                    (0,),
                    {
                        "dtype": DT(str(want.dtype).removeprefix("torch.") if r < 0.8 else self.dtype()),
                        "device": Dev(dev),
                    },
                )
            )
        out = self.var() if rng.random() < 0.3 else None
        self.add(Func(out, kind, args, {"out": V(o)}))

    def gen_func(self):
        i = self.pick()
        if i is None:
            return self.gen_new()
        t, rng, dev, out = self.env.t[i], self.rng, self.env.dev[i], self.var()
        kind = rng.choice(("add", "sub", "mul", "where", "gt", "cat", "stack", "index_select", "clone", "contiguous"))
        kind = kind if rng.random() < 0.8 else rng.choice(("sum", "neg", "abs", "eq", "index", "cat_many", "like"))
        if kind in ("add", "sub", "mul", "gt", "eq"):
            step = Func(out, kind, (V(i), self.scalar(t) if rng.random() < 0.3 else self.operand(t, dev)))
        elif kind == "where":
            cond = self.new(t.shape, "bool", dev)
            step = Func(out, "where", (V(cond), V(i), self.operand(t, dev)))
        elif kind in ("cat", "stack"):
            parts = [V(i)] + [V(self.new(t.shape, t.dtype, dev)) for _ in range(rng.randint(0, 2))]
            step = Func(
                out,
                kind,
                (parts, rng.randint(0, t.dim()) if kind == "stack" or t.dim() == 0 else rng.randrange(t.dim())),
            )
        elif kind == "cat_many":  # past 16 tensor arguments a call finds the ones over one storage another way
            same = [
                j for j, u in self.env.t.items() if u.shape == t.shape and u.dtype == t.dtype and self.env.dev[j] == dev
            ]
            parts = [V(rng.choice(same)) for _ in range(rng.randint(15, 22))]
            step = Func(out, rng.choice(("cat", "stack")), (parts, rng.randrange(t.dim()) if t.dim() else 0))
        elif kind == "like":
            name = rng.choice(("zeros_like", "ones_like", "full_like", "new_zeros", "new_ones", "new_full"))
            kw = {"dtype": DT(self.dtype())} if rng.random() < 0.4 else {}
            if rng.random() < 0.4:
                kw["device"] = Dev(self.device(cur=True))
            value = (self.scalar(),) if name.endswith("full_like") or name == "new_full" else ()
            if name.startswith("new_"):
                step = Method(out, i, name, (self.shape(), *value), kw)
            else:
                step = Func(out, name, (V(i), *value), kw)
        elif kind == "index_select":
            if not t.dim():
                return None
            dim = rng.randrange(t.dim())
            step = Func(out, "index_select", (V(i), dim, V(self.index(t.shape[dim], unique=False, dev=dev))))
        elif kind == "index":
            key = self._key(t, dev)
            if key is None:
                return None
            step = Method(out, i, "__getitem__", (key,))
        elif kind == "clone":
            mf = rng.choice((None, "contiguous_format", "preserve_format"))
            step = Method(out, i, "clone", (), {} if mf is None else {"memory_format": MF(mf)})
        elif kind == "contiguous":
            step = Method(out, i, "contiguous")
        elif kind == "sum":
            step = Method(out, i, "sum", (rng.randrange(t.dim()),) if t.dim() else ())
        else:
            step = Func(out, kind, (V(i),))
        self.add(step)

    def gen_foreach(self):
        """torch._foreach_add_/_foreach_mul_ over a list of tensors (up to 20: one call, many arguments)."""
        i = self.pick()
        if i is None:
            return self.gen_new()
        t, rng, dev = self.env.t[i], self.rng, self.env.dev[i]
        n = rng.choice((1, 2, 3, 4, 17, 20))
        mine = [j for j, u in self.env.t.items() if self.env.dev[j] == dev and u.dtype == t.dtype]
        if rng.random() < 0.3:  # any tensors: mostly calls whose tensors meet, which the reference cannot judge
            selves = [V(rng.choice(mine)) for _ in range(n)]
        else:  # tensors of distinct storages, new ones where those run out
            rng.shuffle(mine)
            storages: set[int] = set()
            selves = []
            for j in mine:
                if len(selves) < n and _storage_key(self.env.t[j]) not in storages:
                    storages.add(_storage_key(self.env.t[j]))
                    selves.append(V(j))
            selves += [V(self.new(self.shape(), t.dtype, dev)) for _ in range(n - len(selves))]
        name = rng.choice(("_foreach_add_", "_foreach_mul_"))
        if rng.random() < 0.4:
            other = self.scalar(t)
        else:
            other = []
            for v in selves:
                u = self.env.t[v.i]
                same = [j for j in mine if self.env.t[j].shape == u.shape]
                other.append(V(rng.choice(same)) if same and rng.random() < 0.5 else V(self.new(u.shape, u.dtype, dev)))
        self.add(Func(None, name, (selves, other)))

    def gen_cast(self):
        i = self.pick()
        if i is None:
            return self.gen_new()
        t, out = self.env.t[i], self.var()
        if self.rng.random() < 0.6:
            dt = self.dtype()
            step = Method(out, i, "to", (DT(dt),))
        else:
            name = self.rng.choice(sorted(CAST_METHODS))
            dt = CAST_METHODS[name]
            step = Method(out, i, name)
        if not cast_defined(t, getattr(torch, dt)):
            return None
        self.add(step)

    def gen_move(self):
        i = self.pick()
        if i is None:
            return self.gen_new()
        rng, out = self.rng, self.var()
        if rng.random() < 0.15:
            like = self.pick()
            if cast_defined(self.env.t[i], self.env.t[like].dtype):
                self.add(ToLike(out, i, like))
            return
        devs = self.devices + (("cur",) if self.flagos_devices else ())
        dt = self.dtype() if rng.random() < 0.2 else None
        if dt is not None and not cast_defined(self.env.t[i], getattr(torch, dt)):
            return None
        self.add(Move(out, i, rng.choice(devs), dt, rng.random() < 0.1))

    def gen_route(self):
        self.add(Route(self.rng.choice(ROUTABLE), self.rng.choice(self.backends)))

    def gen_set_device(self):
        if len(self.flagos_devices) > 1:
            self.add(SetDevice(self.rng.randrange(len(self.flagos_devices))))

    def gen_inference(self):
        self.add(InferenceMode(self.env.inference is None))

    def gen_observe(self):
        i = self.pick()
        if i is not None:
            self.add(Observe(i))

    KINDS = (
        ("gen_new", 8),
        ("gen_view", 26),
        ("gen_inplace", 24),
        ("gen_out", 8),
        ("gen_func", 10),
        ("gen_foreach", 3),
        ("gen_cast", 6),
        ("gen_move", 8),
        ("gen_route", 4),
        ("gen_set_device", 3),
        ("gen_observe", 5),
        ("gen_inference", 2),
    )

    def generate(self) -> list[Step]:
        self.gen_new()
        names, weights = zip(*self.KINDS, strict=True)
        attempts = 0
        try:
            while len(self.program) < self.length and attempts < 10 * self.length:
                attempts += 1
                getattr(self, self.rng.choices(names, weights)[0])()
        finally:
            self.env.close()
        return self.routed()

    def routed(self) -> list[Step]:
        """The program with routes for the operators its steps call: all of them to one backend up front
        (a fifth of the programs), or one before some steps that call it, now and then for the dtype of
        that call only (`add_.Tensor[float32]`). Routes change nothing on the CPU, so they are added
        afterwards."""
        rng, out = self.rng, []
        # the operators each step calls, from a run of its own: a dispatch mode is not transparent (under
        # inference_mode a view of a normal tensor it sees is no view), so the steps were chosen without one
        records = run(self.program, flagos=False, snapshot_every_step=False, calls=True)
        calls = [set(r.calls) & routable() for r in records]
        if rng.random() < 0.2:
            backend = rng.choice(self.backends[1:] or self.backends)
            out = [Route(op, backend) for op in sorted(set().union(*calls))]
            return out + self.program
        for step, called, r in zip(self.program, calls, records, strict=True):
            dtypes = r.call_dtypes
            if called and rng.random() < 0.3:
                backend = rng.choices(self.backends, [1] + [3] * (len(self.backends) - 1))[0]
                op = rng.choice(sorted(called))
                if op in dtypes and rng.random() < 0.3:
                    op = f"{op}[{dtypes[op]}]"
                out.append(Route(op, backend))
            out.append(step)
        return out


#: overloads the generated steps run on the CPU only (inputs made there, index lists): routes change nothing
_CPU_ONLY = frozenset({"randint", "lift_fresh", "detach", "_to_copy"})


class _Ops(TorchDispatchMode):
    """Notes the aten overloads called ("add_.Tensor", "clone")."""

    def __init__(self, seen: set[str], dtypes: dict[str, str] | None = None):
        super().__init__()
        self.seen = seen
        self.dtypes = dtypes  # op -> dtype of its first tensor argument (what a dtype route selects by)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name, overload = func._schema.name.removeprefix("aten::"), func._overloadname
        if name not in _CPU_ONLY:
            op = name if overload == "default" else f"{name}.{overload}"
            self.seen.add(op)
            first = next(iter(_tensors(list(args) + list((kwargs or {}).values()))), None)
            if self.dtypes is not None and first is not None:
                self.dtypes.setdefault(op, str(first.dtype).removeprefix("torch."))
        return func(*args, **(kwargs or {}))


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for a in x:
            yield from _tensors(a)


@functools.cache
def routable() -> frozenset[str]:
    """Overloads a runtime route may name for any backend: all but those only the native route runs (the core's,
    the transfers', the views: routing/native_only.py)."""
    from torch_fl.routing import native_only
    from torch_fl.vocab import ops

    return frozenset(op for op in map(ops.normalize, ops.aten_ops()) if not native_only.is_native_only(op))


def _broadcasts(shape, to) -> bool:
    if len(shape) > len(to):
        return False
    return all(s == 1 or s == d for s, d in zip(reversed(shape), reversed(to), strict=False))


def _factor(n: int, rng: random.Random) -> list[int]:
    """A random shape of `n` elements (1 to 3 dimensions)."""
    if n == 0:
        return rng.choice(([0], [0, 2], [2, 0, 1]))
    dims = []
    rest = n
    for _ in range(rng.randint(0, 2)):
        divs = [d for d in range(1, rest + 1) if rest % d == 0]
        d = rng.choice(divs)
        dims.append(d)
        rest //= d
    return dims + [rest]


def generate(seed: int, devices=("d0", "d1", "cpu"), backends=("native", "cpu_fallback"), length=None) -> list[Step]:
    """The program of `seed` (the same for the same seed, devices and backends)."""
    return Generator(seed, devices, backends, length).generate()


def platform() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The logical devices and route backends programs use here: d1 with a second flagos device, flaggems
    where flagos is backed by CUDA and flag_gems is installed."""
    import importlib.util

    import torch_fl

    devices = ("d0", "d1", "cpu") if torch.flagos.device_count() > 1 else ("d0", "cpu")
    backends = ("native", "cpu_fallback")
    if torch_fl.backing() == "cuda" and importlib.util.find_spec("flag_gems") is not None:
        backends += ("flaggems",)
    return devices, backends


def outcome(program: list[Step]) -> tuple[Diff | None, Known | None]:
    """Run on the CPU and on flagos: the first difference and the known issue it is (or None)."""
    import torch_fl

    want, got = run(program, flagos=False), run(program, flagos=True)
    d = difference(want, got, program, all_strides=torch_fl.backing() == "cpu")
    return d, (known(program, d, with_calls(program, want), got) if d is not None else None)


def main(argv: list[str]) -> int:
    seed = int(argv[0])
    program = generate(seed, *platform())
    diff, issue = outcome(program)
    print(report(program, str(diff) if diff else "none", seed))
    if issue is not None:
        print(f"\nknown issue: {issue.name} ({issue.test})")
    if diff is not None and "--shrink" in argv:
        small = shrink(program, fails=lambda p: (d := compare(p)) is not None and d.kind == diff.kind)
        print("\nshrunk:\n" + report(small, str(compare(small) or "none (shrinking lost it)")))
    return 0 if diff is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
