"""Running a program on both sides and reporting what differs: `compare`, `outcome`, `check`, `report`, and
`shrink`, which deletes steps while a difference remains.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from tests.fuzz.difference import Diff, difference
from tests.fuzz.env import PRELUDE
from tests.fuzz.known import Known, known
from tests.fuzz.runner import Record, run
from tests.fuzz.steps import Step, listing, pasteable


def compare(program: list[Step], all_strides: bool | None = None, skip_known: bool = False) -> Diff | None:
    """Run on the CPU and on flagos; the first difference, or None (`all_strides`: see difference(); by
    default where flagos is backed by host memory). With `skip_known`, a known issue counts as none."""
    if all_strides is None:
        import torch_fl

        all_strides = torch_fl.backing() == "cpu"
    want, got = run(program, flagos=False), run(program, flagos=True)
    d = difference(want, got, program, all_strides)
    if d is not None and (cuda_does_the_same(program, d, got) or refused_as_on_cuda(d, want, got)):
        return None
    if d is not None and skip_known and known(program, d, with_calls(program, want), got) is not None:
        return None
    return d


def cuda_does_the_same(program: list[Step], d: Diff, got: list[Record]) -> bool:
    """Whether `d`, where flagos raised and the CPU did not or the other way round, is CUDA's own behaviour: on
    a CUDA backing flagos owes CUDA's semantics, and CUDA's kernels accept some calls the CPU's refuse (a bool
    `abs_`) and refuse some the CPU's accept. The program then runs natively on the GPU up to that step."""
    import torch_fl

    if d.kind != "outcome" or torch_fl.backing() != "cuda":
        return False
    cuda = run(program[: d.step + 1], flagos=False, snapshot_every_step=False, native="cuda")
    return cuda[d.step].outcome == got[d.step].outcome


# flagos's device check refusing a CPU tensor (torch_fl/csrc/route/device_check.cpp): its rules are CUDA's,
# each tested against CUDA's behaviour in tests/integration/test_device_mismatch.py.
_CPU_REFUSED = re.compile(
    r"found at least two devices, (flagos:\d+ and cpu|cpu and flagos:\d+)! \(in aten::\S+ on flagos"
)


def refused_as_on_cuda(d: Diff, want: list[Record], got: list[Record]) -> bool:
    """Whether `d` is flagos refusing a CPU scalar where the CPU's kernel took it and CUDA's refuses it (on host
    backing: `x.clamp_(min=torch.tensor(0))`, whose CUDA wrapper checks every device)."""
    w, g = want[d.step], got[d.step]
    return (
        d.kind == "outcome"
        and w.outcome == "ok"
        and g.outcome == "raised RuntimeError"
        and bool(_CPU_REFUSED.search(g.message or ""))
    )


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


def outcome(program: list[Step]) -> tuple[Diff | None, Known | None]:
    """Run on the CPU and on flagos: the first difference and the known issue it is (or None)."""
    import torch_fl

    want, got = run(program, flagos=False), run(program, flagos=True)
    d = difference(want, got, program, all_strides=torch_fl.backing() == "cpu")
    if d is not None and (cuda_does_the_same(program, d, got) or refused_as_on_cuda(d, want, got)):
        return None, None
    return d, (known(program, d, with_calls(program, want), got) if d is not None else None)
