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

Where each part lives (each imports only the ones above it):

* env.py: the argument markers (V, DT, Dev, MF), how they print, `ints`, and `Env`, a run's variables;
* steps.py: the steps (New, Func, Method, Slice, SetItem, Move, ToLike, Route, SetDevice, InferenceMode,
  Observe), `listing` and `pasteable`;
* runner.py: `run` and its `Record`s; difference.py: `difference` and `Diff`; known.py: `Known`, `KNOWN`;
* compare.py: `compare`, `outcome`, `check`, `report`, `shrink`;
* undefined.py: what the CPU leaves undefined (the generator's filters);
* gen_base.py, gen_views.py, gen_writes.py, gen_functional.py, gen_conversions.py and generator.py: the
  generator, its choosers and its families of steps, and `generate`.

This module is their one front: the tests, the printed programs (`from tests.fuzz.programs import ints`, steps
pasted into `tests.fuzz.programs.check([...])`) and the command line use it.

`python -m tests.fuzz.programs SEED [--shrink]` prints a seed's program and what differs.
"""

from __future__ import annotations

import sys

import torch

from tests.fuzz.compare import check, compare, outcome, report, shrink, with_calls
from tests.fuzz.difference import Diff, difference
from tests.fuzz.env import DEV_CODE, DT, MF, PRELUDE, Dev, Env, V, fmt, ints
from tests.fuzz.generator import ROUTABLE, Generator, generate, routable
from tests.fuzz.known import KNOWN, Known, known
from tests.fuzz.runner import Record, execute, run
from tests.fuzz.steps import (
    STRIDED,
    VIEWS,
    Func,
    InferenceMode,
    Method,
    Move,
    New,
    Observe,
    Route,
    SetDevice,
    SetItem,
    Slice,
    Step,
    ToLike,
    listing,
    pasteable,
)
from tests.fuzz.undefined import cast_defined, footprint, foreach_undefined, overlap_undefined

# what the tests, printed programs (eval of `pasteable`) and users of this front name
__all__ = [
    "DEV_CODE",
    "DT",
    "KNOWN",
    "MF",
    "PRELUDE",
    "ROUTABLE",
    "STRIDED",
    "VIEWS",
    "Dev",
    "Diff",
    "Env",
    "Func",
    "Generator",
    "InferenceMode",
    "Known",
    "Method",
    "Move",
    "New",
    "Observe",
    "Record",
    "Route",
    "SetDevice",
    "SetItem",
    "Slice",
    "Step",
    "ToLike",
    "V",
    "cast_defined",
    "check",
    "compare",
    "difference",
    "execute",
    "fmt",
    "footprint",
    "foreach_undefined",
    "generate",
    "ints",
    "known",
    "listing",
    "main",
    "outcome",
    "overlap_undefined",
    "pasteable",
    "platform",
    "report",
    "routable",
    "run",
    "shrink",
    "with_calls",
]


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
