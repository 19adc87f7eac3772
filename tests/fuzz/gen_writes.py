"""Steps that write: in-place methods (add_, clamp_, copy_, fill_, index_*_, masked_fill_, ...), `t[key] = v`,
out= calls (into a fresh empty tensor or an existing one) and in-place _foreach calls over many tensors."""

from __future__ import annotations

import torch

from tests.fuzz.env import DT, Dev, V, storage_key
from tests.fuzz.gen_base import GeneratorBase
from tests.fuzz.steps import Func, Method, SetItem
from tests.fuzz.undefined import cast_defined


class WriteSteps(GeneratorBase):
    """gen_inplace, gen_out, gen_foreach: a write to a variable, through its method, an out= argument or a
    _foreach call."""

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
            key = self.index_key(t, dev)
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
                if len(selves) < n and storage_key(self.env.t[j]) not in storages:
                    storages.add(storage_key(self.env.t[j]))
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
