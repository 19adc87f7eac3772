"""Differential fuzzing: random short tensor programs run on flagos and on the CPU must end the same way.

Each program (tests/fuzz/programs.py, the front of the generator and runner modules beside it) is a list
of up to ~40 steps over small tensors (up to 3 dimensions of up to 5 elements before expand/cat/stack, now
and then an empty one or one of 9 to 40), generated from a seed. It runs twice: on flagos, and on the CPU
with every flagos device mapped to the CPU (the reference; a move between two different logical devices
copies there, as it does on flagos). After every step the two runs must agree on:

* the outcome: ran, or raised an exception of the same type (the message is shown, not compared); over
  CUDA, a step whose outcome flagos shares with CUDA's own kernels (run natively on the GPU up to it) ends
  the comparison instead, where the CPU differs from CUDA (a bool `abs_`);
* the result's dtype, shape and device (flagos:0 / flagos:1 / cpu as the reference tracks them), whether
  it is an inference tensor and (for views and layout-keeping copies) whether autograd sees it as a view
  (`_is_view()`), and its strides and storage offset (where flagos is backed by host memory, for every
  result: flagos runs the CPU's own kernels there; over CUDA only where PyTorch fixes them: views,
  layout-keeping copies, and what an explicit `Observe` step reads);
* storage sharing: which variables share a storage (a view of its base, an in-place result of its self,
  a `.to()` to the same device and dtype of its input; a move, cast or clone of nothing);
* which variables' version counters the step changed (what autograd checks saved tensors against);
* every variable's values (exactly for integers and bools; `assert_close`'s default tolerances for floats),
  so a write through a view must reach its base and every other view of it, and nothing else.

What the programs do:

* views: slices with steps (and the step 0 / negative step errors), narrow, select, unfold, transpose,
  permute, expand, as_strided (anywhere in the storage, overlapping too), view/reshape (to shapes a
  non-contiguous tensor cannot view: the error must match), flatten, squeeze, unsqueeze, movedim, diagonal,
  view(dtype) (of the same element size, or of another: the last dimension grows or shrinks, or the call
  raises), basic and advanced indexing (`t[1:, idx]`);
* writes: add_/sub_/mul_ (scalars, tensors, broadcast, 0-dim CPU tensors, alpha), clamp_ (scalars or a
  tensor), copy_ (broadcast, any dtype, across devices), fill_ (scalar or 0-dim tensor), zero_, neg_, abs_,
  index_add_/index_copy_/index_fill_/index_put_ (accumulate or not), masked_fill_, `t[key] = value`, and
  out= forms of add, mul, clamp, cat and index_select (into a fresh empty tensor the kernel resizes, or
  into an existing tensor or view of the result's shape); functional add/sub/mul/where/gt/eq/cat/stack/
  index_select/clone (memory formats)/contiguous/sum/neg/abs; torch._foreach_add_/_foreach_mul_ over lists
  of up to 20 tensors, and cat/stack of 15-22 tensors over shared storages (past 16 tensor arguments a
  routed call finds those sharing a storage another way);
* dtypes: float32/64, float16, bfloat16, int8/16/32/64, uint8, bool; casts by .to(dtype) and .float()/
  .int()/.bool()/..., and the type-promotion errors of in-place and out= calls;
* devices: flagos:0, flagos:1 (with two flagos devices: FLAGOS_HOST_DEVICES=2) and the CPU; .to(device),
  .to(device, dtype), .to(other tensor), copy=True, copy_ across devices, torch.flagos.set_device and the
  current device (`torch.device("flagos")`) for factories (full, arange, tensor, *_like, new_*) and moves;
* torch.inference_mode(), entered and left between steps (views of normal tensors made in it, in-place
  writes to inference tensors outside it: the error must match);
* routes: `routing.set_route` of the operators the program calls (now and then for one dtype:
  `add_.Tensor[float32]`), to native or cpu_fallback (and flaggems where flagos is backed by CUDA and
  flag_gems is installed), switched between steps; a fifth of the programs route every operator they call
  up front. Operators only the native route may run are left alone, and view operators routed to
  cpu_fallback run natively (as routing says they must).

What they avoid or leave out:

* results the CPU itself leaves undefined: a write through a tensor whose elements overlap (expand,
  as_strided, unfold), or that partially overlaps an input, unless the CPU rejects it (then flagos must
  raise the same exception type: the step is kept); a _foreach call whose tensors meet (one named twice,
  one pair's output another's input) or that raises (the CPU runs it pair by pair, a GPU in one kernel,
  and an error leaves the pairs before it written); float-to-integer conversions of values out of the
  integer type's range; indexing with duplicate indices where the writes would race; byte views of bools;
* out-of-range indices (on a GPU a device-side assert, which no program survives), random-number
  operators (flagos' generators are its own), and values that round differently (inputs are small
  integers, exact in every dtype; scalars are multiples of 0.5);
* calls mixing tensors of two flagos devices, or of flagos and a non-scalar CPU tensor: they raise on
  flagos and cannot on the CPU reference (tests/integration/test_device_mismatch.py covers them); on a
  CUDA backing, calls mixing in any CPU tensor (CUDA's kernels judge a 0-dim one per operator). On host
  backing a 0-dim CPU tensor mixes in, and flagos refusing it where CUDA does (its device check's rules,
  tested against CUDA in test_device_mismatch.py) counts as agreement (compare.refused_as_on_cuda);
* autograd beyond version counters and views (no requires_grad, no backward), torch.compile, streams and
  events, non_blocking copies, storage and resize_/set_ operations, sparse, complex and quantized tensors,
  and larger tensors (where kernels take other paths).

Known differences (KNOWN in tests/fuzz/known.py, each with a strict-xfail regression test in
tests/integration/test_fuzz_regressions.py) count as agreement here, so that each run can find the others.

Budgets: `test_short_budget` (CI, marker anyplatform) runs the programs of seeds 0 to 499 in a few seconds;
`test_long_budget` (marker slow) runs FUZZ_PROGRAMS programs (default 5000) from seed FUZZ_START
(default 1000000). A failure prints each failing seed with the one command that reproduces it,

    FUZZ_SEED=<seed> FLAGOS_HOST_DEVICES=2 python -m pytest tests/fuzz/test_differential.py -k seed

(`python -m tests.fuzz.programs <seed> --shrink` does the same outside pytest), the program as torch code
and as pasteable steps, and the program shrunk automatically (steps deleted while the difference stays);
delete more steps by hand and rerun it with `tests.fuzz.programs.check([...])`.
"""

from __future__ import annotations

import os
import time

import pytest
import torch

import torch_fl
from tests.fuzz import programs as P
from tests.unit.routing_fixtures import fake_gems, flag_gems_with, routing_state  # noqa: F401
from torch_fl import routing
from torch_fl.backends import flaggems

pytestmark = [pytest.mark.anyplatform, pytest.mark.usefixtures("routing_state")]

SHORT_BUDGET = 500  # programs in CI: seeds 0 ..
LONG_BUDGET = int(os.environ.get("FUZZ_PROGRAMS", "5000"))
LONG_START = int(os.environ.get("FUZZ_START", "1000000"))
SHRUNK = 3  # failing programs shrunk in one report (each takes up to 60 s)


def _fuzz(seeds) -> None:
    devices, backends = P.platform()
    failures, known = [], {}
    start = time.monotonic()
    for seed in seeds:
        program = P.generate(seed, devices, backends)
        diff, issue = P.outcome(program)
        if issue is not None:
            known.setdefault(issue.name, []).append(seed)
        elif diff is not None:
            failures.append((seed, program, diff))
    took = time.monotonic() - start
    summary = f"{len(seeds)} programs in {took:.1f} s; known issues: " + (
        "; ".join(f"{name} (seeds {s[:5]}{'...' if len(s) > 5 else ''})" for name, s in known.items()) or "none"
    )
    print(summary)
    if not failures:
        return
    lines = [f"{len(failures)} of {len(seeds)} programs differ on flagos: seeds {[s for s, _, _ in failures]}"]
    for seed, program, diff in failures[:SHRUNK]:
        lines += ["", P.report(program, str(diff), seed), "", _shrunk(program, diff)]
    raise AssertionError("\n".join(lines + ["", summary]))


def _shrunk(program, diff) -> str:
    small = P.shrink(program, fails=lambda p: (d := P.compare(p)) is not None and d.kind == diff.kind)
    return "shrunk:\n" + P.report(small, str(P.compare(small)))


def test_short_budget():
    _fuzz(range(SHORT_BUDGET))


@pytest.mark.slow
def test_long_budget():
    _fuzz(range(LONG_START, LONG_START + LONG_BUDGET))


def test_seed():
    """FUZZ_SEED=<seed>: that seed's program alone, shrunk if it fails (a known issue is an xfail)."""
    if "FUZZ_SEED" not in os.environ:
        pytest.skip("set FUZZ_SEED=<seed> to run one program")
    seed = int(os.environ["FUZZ_SEED"])
    program = P.generate(seed, *P.platform())
    print(P.report(program, "(run)", seed))
    diff, issue = P.outcome(program)
    if issue is not None:
        pytest.xfail(f"known issue: {issue.name} ({issue.test}); {diff}")
    if diff is not None:
        raise AssertionError(P.report(program, str(diff), seed) + "\n\n" + _shrunk(program, diff))


# ------------------------------------------------------------------------------------------- the harness


def test_programs_are_deterministic_and_print_as_python():
    devices, backends = P.platform()
    for seed in range(20):
        program = P.generate(seed, devices, backends)
        assert program == P.generate(seed, devices, backends)
        assert eval(P.pasteable(program), vars(P)) == program  # noqa: S307  (the printed form builds it back)
        assert len(P.listing(program).splitlines()) == len(program)


def test_programs_cover_what_the_docstring_says():
    steps = [s for seed in range(300) for s in P.generate(seed, *P.platform())]
    names = {s.name for s in steps if isinstance(s, (P.Method, P.Func))}
    for name in ("as_strided", "unfold", "expand", "diagonal", "view", "copy_", "index_put_", "cat", "to"):
        assert name in names
    assert any(isinstance(s, P.Func) and "out" in s.kwargs for s in steps)
    assert {s.backend for s in steps if isinstance(s, P.Route)} >= {"native", "cpu_fallback"}
    moves = {s.dev for s in steps if isinstance(s, P.Move)}
    assert moves >= {"d0", "cpu", "cur"} | ({"d1"} if torch.flagos.device_count() > 1 else set())
    records = [r for seed in range(100) for r in P.run(P.generate(seed, *P.platform()), flagos=False)]
    assert any(r.outcome.startswith("raised") for r in records)  # errors are compared too
    assert any(isinstance(s, P.InferenceMode) and s.enabled for s in steps)


@pytest.mark.filterwarnings("ignore::torch_fl.vocab.errors.FallbackWarning")  # views: cpu_fallback has none
def test_route_names_are_routable():
    for op in P.ROUTABLE:
        routing.set_route(op, "cpu_fallback")  # raises for a name routing does not know or keeps native
        routing.clear_route(op)


def test_a_write_that_misses_the_base_is_a_difference():
    # a backend whose in-place mul writes a copy: the view's base keeps its old values on flagos
    flaggems.LOADER.use_module(flag_gems_with({"mul_.Tensor": lambda a, b: a.clone().mul_(b)}))
    program = [
        P.New(out=0, shape=(2, 4), dtype="float32", dev="d0", seed=1),
        P.Slice(out=1, on=0, dim=1, start=None, stop=None, step=2),
        P.Route(op="mul_.Tensor", backend="flaggems"),
        P.Method(out=None, on=1, name="mul_", args=(3,)),
    ]
    diff = P.compare(program)
    assert diff is not None and diff.kind == "values" and diff.step == 3, diff
    assert P.shrink(program, budget_s=10) == program  # every step is needed


def test_an_error_only_one_side_raises_is_a_difference():
    x = P.New(out=0, shape=(3,), dtype="float32", dev="d0", seed=1)
    y = P.New(out=1, shape=(4,), dtype="float32", dev="d0", seed=2)
    add = P.Func(out=2, name="add", args=(P.V(0), P.V(1)))
    assert P.compare([x, y, add]) is None  # the CPU rejects shapes that do not broadcast, flagos too
    # a backend that checks nothing
    flaggems.LOADER.use_module(flag_gems_with({"add.Tensor": lambda a, b, alpha=1: a.clone()}))
    diff = P.compare([x, y, P.Route(op="add.Tensor", backend="flaggems"), add])
    assert diff is not None and diff.kind == "outcome" and diff.step == 3, diff


@pytest.mark.skipif(torch_fl.backing() != "cpu", reason="host backing: the CPU is the reference for CPU scalars")
def test_a_cpu_scalar_flagos_refuses_as_cuda_does_is_agreement_and_one_it_takes_is_compared():
    x = P.New(out=0, shape=(3,), dtype="float32", dev="d0", seed=1)
    c = P.New(out=1, shape=(), dtype="float32", dev="cpu", seed=2)
    # clamp_'s CUDA wrapper checks every device: flagos raises, the CPU computes
    clamp = P.Method(out=None, on=0, name="clamp_", kwargs={"min": P.V(1)})
    assert P.run([x, c, clamp], flagos=True)[2].outcome == "raised RuntimeError"
    assert P.compare([x, c, clamp]) is None
    # mul takes a CPU scalar on CUDA too: a backend that drops it differs
    mul = P.Func(out=2, name="mul", args=(P.V(0), P.V(1)))
    assert P.compare([x, c, mul]) is None
    flaggems.LOADER.use_module(flag_gems_with({"mul.Tensor": lambda a, b: a.clone()}))
    diff = P.compare([x, c, P.Route(op="mul.Tensor", backend="flaggems"), mul])
    assert diff is not None and diff.kind == "values", diff
