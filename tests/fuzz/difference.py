"""Where two runs of a program differ: the first step whose records disagree, and how."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tests.fuzz.runner import Record
from tests.fuzz.steps import Step


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
