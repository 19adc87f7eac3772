"""Steps that make views: slices, narrow, select, unfold, transpose, permute, diagonal, expand, as_strided,
view/reshape (also to shapes a non-contiguous tensor cannot view), flatten, squeeze, unsqueeze, movedim and
view(dtype)."""

from __future__ import annotations

import random

import torch

from tests.fuzz.env import DT
from tests.fuzz.gen_base import DTYPES, GeneratorBase
from tests.fuzz.steps import Method, Slice

#: the dtypes of each one's element size (view(dtype) to one of those keeps the shape)
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


class ViewSteps(GeneratorBase):
    """gen_view: a view of a variable (or, with none yet, a new tensor)."""

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
