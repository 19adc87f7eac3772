"""The generator's bookkeeping and choices: its random source, the reference run each candidate step is tried on
(`add` keeps a step only when its CPU result is defined), and the choosers every family of steps draws from
(a variable, a dtype, a device, a shape, a scalar, an operand, an index tensor or key).

The families (gen_views.py, gen_writes.py, gen_functional.py, gen_conversions.py) are subclasses of
`GeneratorBase`; generator.py puts them together. Every choice draws from the one `self.rng` in program
order, so a seed gives the same program whichever module a method lives in.
"""

from __future__ import annotations

import contextlib
import random
import warnings
from collections.abc import Callable

import torch

from tests.fuzz.env import DT, Dev, Env, V
from tests.fuzz.runner import execute
from tests.fuzz.steps import Func, Method, New, Step
from tests.fuzz.undefined import (
    cpu_values_put,
    cuda_judges_cpu_tensor,
    fill_path,
    foreach_undefined,
    is_float,
    is_foreach,
    overlap_undefined,
)

DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")
DTYPE_WEIGHTS = (6, 2, 2, 1, 4, 2, 1, 1, 2, 2)
SCALARS = (0, 1, 2, -1, -2, 3, 0.5, 1.5, -0.5, True)


class GeneratorBase:
    """What every family of steps draws from: the random source, the program so far, the reference run it is
    tried on, and the choosers."""

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
            # an index_put of CPU values, which CUDA and flagos refuse, and on a GPU any call mixing in a CPU
            # tensor (CUDA's kernels judge it)
            never = (
                (is_foreach(step) and foreach_undefined(step, env))
                or (risky and fill_path(step, env))
                or cpu_values_put(step, env)
                or cuda_judges_cpu_tensor(step, env)
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
            if is_foreach(step):  # the CPU raises pair by pair: the pairs before stay written
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
        if t is not None and not is_float(t.dtype) and isinstance(s, float) and self.rng.random() < 0.8:
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

    # -- a new tensor: what every family makes when it finds no variable to use

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

    def index_key(self, t: torch.Tensor, dev: str):
        """A key for `t[key]` (None: none for a 0-dim `t`): ints, slices and at most one index tensor."""
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


def _broadcasts(shape, to) -> bool:
    if len(shape) > len(to):
        return False
    return all(s == 1 or s == d for s, d in zip(reversed(shape), reversed(to), strict=False))
