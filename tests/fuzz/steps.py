"""The steps of a fuzz program: each a small frozen dataclass whose repr is the Python that builds it and whose
`line()` is the torch code it runs, so a failing program prints as a list to paste back and shrink by hand.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from tests.fuzz.env import DEV_CODE, Env, V, call_args, first_device, fmt, ints, refs_in

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
        return on + refs_in([getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("out", "on")])

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
        return self.bind(f"torch.{self.name}({call_args(self.args, self.kwargs)})")

    def result_dev(self, env):
        if "out" in self.kwargs:
            return env.dev_of(self.kwargs["out"])
        if "device" in self.kwargs:
            return env.dev_of(self.kwargs["device"])
        return env.dev_of(first_device(self.args))

    def strided(self):
        return self.name in STRIDED

    def written(self, env):
        if "out" in self.kwargs:
            return [env.value(self.kwargs["out"])]
        if self.name.endswith("_"):  # torch._foreach_add_(selves, ...)
            return [env.t[i] for i in refs_in(self.args[0])]
        return []

    def read(self, env):
        return [env.t[i] for i in refs_in(self.args) if i in env.t]


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
        return self.bind(f"t{self.on}.{self.name}({call_args(self.args, self.kwargs)})")

    def result_dev(self, env):
        return env.dev_of(self.kwargs["device"]) if "device" in self.kwargs else env.dev[self.on]

    def strided(self):
        return self.name in STRIDED

    def written(self, env):
        return [env.t[self.on]] if self.name.endswith("_") and not self.name.startswith("__") else []

    def read(self, env):
        return [env.t[i] for i in refs_in((self.args, self.kwargs)) if i in env.t]


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
        return [env.t[i] for i in refs_in(self.value) if i in env.t]


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


def listing(program: list[Step]) -> str:
    """The program as the torch code it runs on flagos, one numbered line per step."""
    width = len(str(len(program)))
    return "\n".join(f"{step.line():<60}  # {k:>{width}}" for k, step in enumerate(program))


def pasteable(program: list[Step]) -> str:
    """The program as the list of steps that builds it (to paste into check([...]) and shrink by hand)."""
    return "[\n" + "".join(f"    {step!r},\n" for step in program) + "]"
