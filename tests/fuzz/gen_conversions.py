"""Steps that change a tensor's dtype or device: .to(dtype) and .float()/.int()/..., .to(device[, dtype]
[, copy=True]) and .to(other tensor); only where the conversion of its values is defined."""

from __future__ import annotations

import torch

from tests.fuzz.env import DT
from tests.fuzz.gen_base import GeneratorBase
from tests.fuzz.steps import Method, Move, ToLike
from tests.fuzz.undefined import cast_defined

#: the cast methods and the dtype each gives
CAST_METHODS = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "int": "int32", "long": "int64"}
CAST_METHODS.update({"bool": "bool", "double": "float64", "byte": "uint8"})


class ConversionSteps(GeneratorBase):
    """gen_cast, gen_move: a variable converted to another dtype, or moved to another device."""

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
