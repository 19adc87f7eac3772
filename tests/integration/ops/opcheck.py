"""Shared helpers for the per-operator tests (tests/integration/ops/test_*_dispatch.py).

Each test file declares one `OpSpec` (how to call the operator, which inputs
and dtypes it accepts) and two classes that
inherit the tests from here: `OpTests` (results against CPU, native CUDA and
the FlagGems route) and `DispatchTests` (the exact dispatch-log lines). The
parametrization (cases, backends) is done by conftest.py's
pytest_generate_tests from the class's `spec`.

This lives beside conftest.py rather than in it because test modules cannot
import a conftest reliably (pytest imports every conftest.py under the same
module name).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest
import torch
from torch.testing import make_tensor
from torch.utils._pytree import tree_flatten, tree_map

import torch_fl
from torch_fl import backends
from torch_fl.conformance.runner import tensor_to_flagos

# ------------------------------------------------------------------ platform
ON_CUDA = torch_fl.backing() == "cuda"
HAS_FLAGGEMS = ON_CUDA and importlib.util.find_spec("flag_gems") is not None
HAS_ROUTING = importlib.util.find_spec("torch_fl.routing") is not None
# The dispatch-log label of the native route: the platform's name (FEP 0025).
PLATFORM = "cuda" if ON_CUDA else "cpu"

requires_routing = pytest.mark.skipif(not HAS_ROUTING, reason="needs torch_fl.routing (set_route, FLAGOS_OP_*)")

# Backends a dispatch test is parametrized over; each carries the marker that
# skips it where the machine cannot run it (see conftest.py).
BACKEND_PARAMS = [
    pytest.param(PLATFORM, marks=pytest.mark.anyplatform, id=PLATFORM),
    pytest.param("flaggems", marks=pytest.mark.flaggems, id="flaggems"),
    pytest.param("flaggems_python", marks=pytest.mark.flaggems_python, id="flaggems_python"),
]

# ---------------------------------------------------------------- tolerances
# FEP 0025: rtol = atol = 1e-4 for fp32 and 1e-3 for fp16. bf16 keeps 8
# significant bits, so one rounding of a result is off by up to 2**-8 ~ 3.9e-3
# relative; a kernel that rounds an intermediate once more (e.g. a bf16
# accumulator or a different reduction order) can be off by two units in the
# last place, 2**-7 ~ 7.8e-3. 1e-2 allows that and nothing coarser.
TOLERANCES = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1e-2),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1e-4, 1e-4),
}

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INTS = (torch.int64, torch.int32)
BOOL = (torch.bool,)


# Gradients: a backward formula is several kernels, each rounding its result
# to the dtype (rsqrt's is grad * -0.5 * rsqrt(x)**3: four roundings). In
# half precision (2**-11 ~ 4.9e-4 relative per rounding) CUDA and CPU then
# differ by up to ~6 units in the last place (measured 2.8e-3 relative on the
# H200); 5e-3 allows that. fp32 and bf16 keep the FEP bounds above.
GRAD_TOLERANCES = {**TOLERANCES, torch.float16: (5e-3, 5e-3)}


def tolerance(dtype: torch.dtype, table: dict = TOLERANCES) -> tuple[float, float]:
    """(rtol, atol) for `dtype`; exact (0, 0) for integer and bool."""
    return table.get(dtype, (0.0, 0.0))


# ---------------------------------------------------------------- comparing
def assert_on_flagos_like(actual, expected) -> None:
    """Every tensor of `actual` is a flagos tensor with the shape and dtype of its CPU twin."""
    flat_a, spec_a = tree_flatten(actual)
    flat_e, spec_e = tree_flatten(expected)
    assert spec_a == spec_e, f"output structure {spec_a} != {spec_e}"
    for a, e in zip(flat_a, flat_e, strict=True):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor), f"expected a tensor, got {type(a).__name__}"
            assert a.device.type == "flagos", f"output on {a.device}, expected flagos"
            assert a.shape == e.shape, f"shape {tuple(a.shape)} != {tuple(e.shape)}"
            assert a.dtype == e.dtype, f"dtype {a.dtype} != {e.dtype}"


def assert_close_to(actual, expected, table: dict = TOLERANCES) -> None:
    """Values of `actual` (any device) match `expected` within the tolerance for each result's dtype.

    The result's dtype, not the inputs': int64 / 2 is a float32 result and
    gets the float32 bound; a comparison of floats is a bool and is exact.
    """
    flat_a, _ = tree_flatten(actual)
    flat_e, _ = tree_flatten(expected)
    assert len(flat_a) == len(flat_e), f"{len(flat_a)} results, expected {len(flat_e)}"
    for i, (a, e) in enumerate(zip(flat_a, flat_e, strict=True)):
        if not isinstance(e, torch.Tensor):
            assert a == e, f"result {i}: {a!r} != {e!r}"
            continue
        rtol, atol = tolerance(e.dtype, table)
        torch.testing.assert_close(
            a.detach().cpu(),
            e.detach().cpu(),
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            check_device=False,
            msg=lambda m, i=i: f"result {i}: {m}",
        )


class _TargetDevice:
    """Placeholder for the device argument of factory functions; replaced per run."""

    def __repr__(self) -> str:
        return "TARGET"


TARGET = _TargetDevice()


def to_device(tree, move: Callable[[torch.Tensor], torch.Tensor], device: str):
    """`tree` with every tensor moved by `move` (requires_grad kept, as a new leaf) and TARGET -> `device`."""

    def one(v):
        if v is TARGET:
            return device
        if not isinstance(v, torch.Tensor):
            return v
        m = move(v.detach())
        return m.requires_grad_(v.requires_grad) if v.requires_grad else m

    return tree_map(one, tree, is_leaf=lambda v: v is TARGET)


def _grad_inputs(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor) and t.requires_grad]


def run_with_grads(fn, args, kwargs, grad_out_seed: int = 7):
    """(outputs, gradients of the inputs that require grad) for a random output gradient."""
    out = fn(*args, **kwargs)
    inputs = _grad_inputs((args, kwargs))
    if not inputs:
        return out, None
    outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    gen = torch.Generator().manual_seed(grad_out_seed)
    grads = [torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device) for o in outs]
    return out, torch.autograd.grad(outs, inputs, grads)


# ------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class Inputs:
    """A named recipe for one call's CPU arguments: build(dtype, requires_grad) -> (args, kwargs)."""

    name: str
    build: Callable[[torch.dtype, bool], tuple[tuple, dict]]


def tensor(shape, dtype, requires_grad=False, *, low=None, high=None, noncontiguous=False) -> torch.Tensor:
    """A deterministic-per-seed CPU tensor (torch.testing.make_tensor)."""
    grad = requires_grad and (dtype.is_floating_point or dtype.is_complex)
    return make_tensor(
        shape, dtype=dtype, device="cpu", low=low, high=high, noncontiguous=noncontiguous, requires_grad=grad
    )


def transposed(shape, dtype, requires_grad=False, **kw) -> torch.Tensor:
    """A non-contiguous tensor of `shape` made by transposing its last two dims."""
    t = tensor(shape[:-2] + (shape[-1], shape[-2]), dtype, **kw).transpose(-1, -2)
    return t.requires_grad_() if requires_grad and dtype.is_floating_point else t


UNARY_SHAPES = {"scalar0d": (), "empty": (0, 3), "vector": (7,), "matrix": (4, 5), "batch": (2, 3, 4)}


def unary_inputs(low=None, high=None) -> list[Inputs]:
    """x of several shapes (0-d, empty, 1-3 d) plus a strided and a transposed non-contiguous x."""
    out = [
        Inputs(name, lambda dt, g, s=shape: ((tensor(s, dt, g, low=low, high=high),), {}))
        for name, shape in UNARY_SHAPES.items()
    ]
    out.append(
        Inputs("noncontig", lambda dt, g: ((tensor((5, 6), dt, g, low=low, high=high, noncontiguous=True),), {}))
    )
    out.append(Inputs("transposed", lambda dt, g: ((transposed((4, 6), dt, g, low=low, high=high),), {})))
    return out


BINARY_SHAPES = {
    "same": ((4, 5), (4, 5)),
    "broadcast": ((4, 1), (1, 5)),
    "broadcast_rank": ((2, 4, 5), (5,)),
    "scalar0d": ((), (3, 2)),
    "empty": ((0, 5), (1, 5)),
}


def binary_inputs(low=None, high=None, rhs_low=None, rhs_high=None) -> list[Inputs]:
    """(a, b) pairs: same shape, broadcast, 0-d, empty, and a non-contiguous pair."""
    rl, rh = (low, high) if rhs_low is None and rhs_high is None else (rhs_low, rhs_high)

    def pair(sa, sb, nc=False):
        return lambda dt, g: (
            (
                tensor(sa, dt, g, low=low, high=high, noncontiguous=nc),
                tensor(sb, dt, g, low=rl, high=rh, noncontiguous=nc),
            ),
            {},
        )

    out = [Inputs(name, pair(a, b)) for name, (a, b) in BINARY_SHAPES.items()]
    out.append(Inputs("noncontig", pair((3, 4), (3, 4), nc=True)))
    return out


# ---------------------------------------------------------------------- spec
@dataclass(frozen=True)
class Case:
    inputs: Inputs
    dtype: torch.dtype

    @property
    def id(self) -> str:
        return f"{self.inputs.name}-{str(self.dtype).replace('torch.', '')}"


@dataclass(frozen=True)
class OpSpec:
    """One first-phase operator.

    overload:  the FEP overload (`add.Tensor`, `mm`).
    fn:        calls the operator the way a user does: fn(*args, **kwargs).
    inputs:    argument recipes; dtypes: the dtypes to run each recipe in.
    grad:      whether gradients flow (checked for floating dtypes).
    setup/call: Python source for the dispatch tests (setup makes flagos
               tensors; `call` calls the overload through torch.ops.aten).
    """

    overload: str
    fn: Callable
    inputs: Sequence[Inputs]
    dtypes: Sequence[torch.dtype]
    setup: str
    call: str
    grad: bool = False
    extra_cases: Sequence[Case] = field(default_factory=tuple)
    # Known FlagGems defects: case -> why FlagGems gets it wrong, or None. Such
    # cases are strict xfails of the FlagGems comparison (a fix upstream turns
    # them into failures to clean up) and the operator stays native for them
    # in configs/backends_flaggems.conf.
    flaggems_defect: Callable[[Case], str | None] = lambda case: None
    # Defects whose visibility depends on memory FlagGems leaves unwritten:
    # those cases may pass by chance, so their xfail is not strict.
    flaggems_defect_may_pass: Callable[[Case], bool] = lambda case: False
    # FlagGems autotunes this operator's Triton kernel on first use of each
    # dtype: its FlagGems tests start first in a run (conftest.py).
    flaggems_autotunes: bool = False

    def cases(self) -> list[Case]:
        return [Case(i, d) for i in self.inputs for d in self.dtypes] + list(self.extra_cases)

    def expected_lines(self, backend: str) -> list[str]:
        """The dispatch-log lines `call` prints when the overload is routed to `backend`.

        Composite operators run whole on the native route too, so every
        backend logs the overload that was called, by FEP 0025's name of the
        backend (`flagos_python` for `flaggems_python`).
        """
        return [f"[flagos dispatch] {self.overload} -> {backends.log_name(backend)}"]

    # -- correctness --------------------------------------------------------
    def build(self, case: Case):
        torch.manual_seed(0)
        grad = self.grad and (case.dtype.is_floating_point or case.dtype.is_complex)
        return case.inputs.build(case.dtype, grad)

    def check_against(self, case: Case, reference_device_move, reference_name: str, may_extend=False) -> None:
        """Run on flagos and on the reference (CPU or native CUDA); compare results and gradients.

        `may_extend`: the route may have kernels the reference lacks (FlagGems
        has integer mm, CUDA has not); what it computes then must match the CPU.
        """
        args, kwargs = self.build(case)
        ref_args, ref_kwargs = to_device((args, kwargs), reference_device_move, reference_name.split()[-1])
        cpu_args, cpu_kwargs = to_device((args, kwargs), _cpu, "cpu")
        f_args, f_kwargs = to_device((args, kwargs), tensor_to_flagos, "flagos")
        try:
            if reference_name == "native cuda":
                # Native CUDA backward cannot run in a process that imported torch_fl
                # (README, Limitations): forward against CUDA, gradients against CPU.
                with torch.no_grad():
                    expected = self.fn(*ref_args, **ref_kwargs)
                ref_grads = run_with_grads(self.fn, cpu_args, cpu_kwargs)[1]
            else:
                expected, ref_grads = run_with_grads(self.fn, ref_args, ref_kwargs)
        except NotImplementedError as e:  # the reference has no kernel for this dtype
            try:
                actual, grads = run_with_grads(self.fn, f_args, f_kwargs)
            except NotImplementedError as refusal:
                self._skip_same_refusal(e, refusal, reference_name)
            refused = str(e).splitlines()[0]
            assert may_extend, f"flagos computed what {reference_name} refuses ({refused}); it must refuse the same way"
            expected, ref_grads = run_with_grads(self.fn, cpu_args, cpu_kwargs)
            return self._compare(actual, grads, expected, ref_grads, "cpu")
        try:
            actual, grads = run_with_grads(self.fn, f_args, f_kwargs)
        except NotImplementedError as e:
            self._skip_if_backing_refuses_too(e, case)
            raise
        self._compare(actual, grads, expected, ref_grads, reference_name)

    @staticmethod
    def _compare(actual, grads, expected, ref_grads, reference_name: str) -> None:
        assert_on_flagos_like(actual, tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, expected))
        assert_close_to(actual, expected)
        assert (grads is None) == (ref_grads is None), f"gradients on flagos: {grads is not None}, {reference_name}"
        if grads is not None:
            assert_on_flagos_like(list(grads), [g.cpu() for g in ref_grads])
            assert_close_to(list(grads), list(ref_grads), GRAD_TOLERANCES)

    @staticmethod
    def _skip_same_refusal(ref_error: Exception, refusal: Exception, reference_name: str):
        """The reference has no kernel (CUDA has no integer matmul) and flagos refused too: the same way, or fail."""
        assert str(refusal).splitlines()[0] == str(ref_error).splitlines()[0], (
            f"flagos refused differently from {reference_name}: {refusal} vs {ref_error}"
        )
        pytest.skip(f"{reference_name} has no kernel: {str(ref_error).splitlines()[0]} (flagos says the same)")

    def _skip_if_backing_refuses_too(self, error: Exception, case: Case) -> None:
        """Flagos raised NotImplementedError: a skip when the backing device's own kernel raises it too."""
        if not ON_CUDA:
            return
        args, kwargs = self.build(case)
        c_args, c_kwargs = to_device((args, kwargs), _native_cuda, "cuda")
        try:
            with torch.no_grad():
                self.fn(*c_args, **c_kwargs)
        except NotImplementedError as native_error:
            if str(native_error).splitlines()[0] == str(error).splitlines()[0]:
                pytest.skip(f"the cuda backing has no kernel: {str(error).splitlines()[0]} (native CUDA says the same)")


def reduction_inputs(cases: dict) -> list[Inputs]:
    """Inputs for fn(x, dims, keepdim); cases map name -> (shape, dims, keepdim, non-contiguous)."""
    return [
        Inputs(n, lambda dt, g, s=s, d=d, k=k, nc=nc: ((tensor(s, dt, g, noncontiguous=nc), d, k), {}))
        for n, (s, d, k, nc) in cases.items()
    ]


def unary_spec(overload: str, fn, dtypes, *, low=None, high=None, grad=True) -> OpSpec:
    """The spec of an elementwise unary operator called as torch.ops.aten.<overload>(x)."""
    lo, hi = -0.9 if low is None else low, 0.9 if high is None else high
    return OpSpec(
        overload=overload,
        fn=fn,
        inputs=unary_inputs(low, high),
        dtypes=dtypes,
        grad=grad,
        setup=f"x = torch.empty(4, 5, device='flagos').uniform_({lo}, {hi})",
        call=f"torch.ops.aten.{overload}(x)",
    )


def _cpu(t: torch.Tensor) -> torch.Tensor:
    return t


def _native_cuda(t: torch.Tensor) -> torch.Tensor:
    return t.to("cuda")


# -------------------------------------------------------------- dispatch log
def dispatch_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.startswith("[flagos dispatch]")]


MARK = "@@flagos-call@@"


def run_logged(setup: str, call: str, env: dict[str, str] | None = None, timeout: float = 120) -> list[str]:
    """Dispatch-log lines printed by `call` in a fresh interpreter with FLAGOS_LOG_DISPATCH=1 and `env`.

    Lines printed by `setup` (making the inputs) are dropped.
    """
    code = "\n".join(
        [
            "import os, sys, torch, torch_fl",
            "import torch.nn.functional as F",
            textwrap.dedent(setup),
            f"print({MARK!r}, file=sys.stderr, flush=True)",
            f"_ = {call}",
            "sys.stderr.flush()",
            "os._exit(0)",  # skip interpreter teardown: the result is all we need
        ]
    )
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FLAGOS_OP_")}
    full_env.update({"FLAGOS_LOG_DISPATCH": "1", **(env or {})})
    root = os.path.dirname(torch_fl.__path__[0])  # the torch_fl under test, not another install
    full_env["PYTHONPATH"] = root + (os.pathsep + full_env["PYTHONPATH"] if full_env.get("PYTHONPATH") else "")
    proc = subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"snippet failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
    assert MARK in proc.stderr, proc.stderr[-3000:]
    return dispatch_lines(proc.stderr.split(MARK, 1)[1])


def env_override(overload: str, backend: str) -> dict[str, str]:
    """FLAGOS_OP_<overload with '.' as '__'>=backend."""
    return {f"FLAGOS_OP_{overload.replace('.', '__')}": backend}


def run_in_process(spec: OpSpec, capfd) -> list[str]:
    """Dispatch-log lines printed by `spec.call` in this process (log switched on around the call)."""
    ns: dict = {"torch": torch, "F": torch.nn.functional}
    exec(textwrap.dedent(spec.setup), ns)
    capfd.readouterr()
    from torch_fl import routing

    # The public switch: every route's kernel logs (FlagGems routes held by
    # Python kernels too, which the C++ switch alone would not reach).
    with routing.dispatch_log():
        eval(spec.call, ns)
    return dispatch_lines(capfd.readouterr().err)


# ----------------------------------------------------------- test templates
class OpTests:
    """Results of the operator on flagos; parametrized over `spec.cases()` by conftest.py."""

    spec: OpSpec

    @pytest.mark.anyplatform
    def test_matches_cpu(self, case):
        self.spec.check_against(case, _cpu, "cpu")

    @pytest.mark.cuda
    def test_matches_native_cuda(self, case):
        self.spec.check_against(case, _native_cuda, "native cuda")

    @pytest.mark.flaggems
    @requires_routing
    def test_flaggems_matches_native_cuda(self, case, request):
        from torch_fl import routing

        if defect := self.spec.flaggems_defect(case):
            strict = not self.spec.flaggems_defect_may_pass(case)
            request.applymarker(pytest.mark.xfail(reason=f"FlagGems defect: {defect}", strict=strict))
        with routing.route({self.spec.overload: "flaggems"}):
            self.spec.check_against(case, _native_cuda, "native cuda", may_extend=True)


class DispatchTests:
    """The exact `[flagos dispatch] <overload> -> <backend>` lines; `backend` parametrized by conftest.py."""

    spec: OpSpec

    @pytest.mark.anyplatform
    def test_default_route_logs_platform(self, capfd):
        assert run_in_process(self.spec, capfd) == self.spec.expected_lines(PLATFORM)

    @requires_routing
    def test_env_override(self, backend):
        # A FlagGems kernel that autotunes does it again in the fresh process,
        # for minutes on the H200 while other xdist workers autotune too: past
        # the usual limit.
        timeout = 480 if self.spec.flaggems_autotunes and backend != PLATFORM else 120
        lines = run_logged(self.spec.setup, self.spec.call, env_override(self.spec.overload, backend), timeout)
        assert lines == self.spec.expected_lines(backend)

    @requires_routing
    def test_set_route(self, backend, capfd):
        from torch_fl import routing

        with routing.route({self.spec.overload: backend}):
            lines = run_in_process(self.spec, capfd)
        assert lines == self.spec.expected_lines(backend)
