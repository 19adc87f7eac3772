"""Functional steps: a new tensor from existing ones (arithmetic, where, comparisons, cat/stack of a few or of
15-22 tensors, index_select, indexing, clone, contiguous, sum, *_like and new_* factories)."""

from __future__ import annotations

from tests.fuzz.env import DT, MF, Dev, V
from tests.fuzz.gen_base import GeneratorBase
from tests.fuzz.steps import Func, Method


class FunctionalSteps(GeneratorBase):
    """gen_func: a functional call on a variable, bound to a new one."""

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
            key = self.index_key(t, dev)
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
