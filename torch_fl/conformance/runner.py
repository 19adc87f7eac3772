"""Run one OpInfo's sample inputs on flagos and on a reference and compare them.

The reference is CPU on host backing. On a CUDA backing the forward result is
compared with native CUDA (flagos runs CUDA's kernels: same RNG stream, same
dtype support) and gradients with CPU, TF32 off (native CUDA backward cannot
run beside torch_fl in one process), at the tolerance PyTorch's own
CUDA-vs-CPU test uses (1e-3), and only where CPU's forward agrees with
CUDA's: CPU gradients are no reference for random ops or results that are
not unique (the sample then passes on its forward alone, with a note).

Every sample is generated on flagos (as PyTorch's own TestCommon.test_compare_cpu
does for a device), copied to CPU byte for byte (same sizes, strides and
storage offset, so non-contiguous samples stay non-contiguous; tensors a
sample deliberately keeps on CPU stay there), run on both devices with the
same RNG seed, and compared with
`torch.testing.assert_close` (its per-dtype default tolerances, or the
OpInfo's own `toleranceOverride` for TestCommon.test_compare_cpu where it has
one). The outcome of a sample is one of:

* pass  - flagos and CPU agree (forward and, with backward, the gradients);
* fail  - both ran but the results differ (or a flagos output is not on flagos);
* error - CPU ran the sample but flagos raised;
* skip  - the sample cannot be judged: CPU itself rejects it, or it needs a
          feature flagos does not claim (sparse, quantized, nested tensors).

An op's status is the worst of its samples (error > fail > pass), or skip
when no sample could be judged.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_flatten, tree_map

DEVICE = "flagos"
SEED = 1234

# dtypes swept when --dtypes is not given: one of each family the host runs.
DEFAULT_DTYPES = ("float32", "int64", "bool", "complex64")

# Ops whose outputs are uninitialised memory by definition: only the metadata
# (shape, dtype, device) can be compared.
UNINITIALISED_OUTPUT = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "empty_permuted",
        "new_empty",
        "new_empty_strided",
        "torch.empty",
    }
)


# Gradients on a CUDA backing are compared with CPU ones at the tolerance
# PyTorch's TestCommon.test_compare_cpu uses for CUDA against CPU.
CUDA_VS_CPU_TOLERANCE = (1e-3, 1e-3)
NOT_JUDGED_NOTE = "backward not judged: native CUDA and CPU forwards differ, so CPU gradients are no reference"

# torch.cuda.jiterator builds CUDA kernels from C++ strings at run time and
# takes CUDA tensors only: a CUDA Python API, not ATen operators a device routes.
CUDA_ONLY_PREFIXES = ("jiterator_",)

# Ops whose purpose is a sparse layout (flagos claims strided tensors only).
SPARSE_OPS = frozenset({"to_sparse", "sparse_sampled_addmm", "sparse_mm_reduce"})


class SampleSkip(Exception):
    """The sample needs something flagos does not claim; not a failure."""


@dataclass
class OpResult:
    name: str
    status: str = "skip"
    counts: dict = field(default_factory=lambda: {"pass": 0, "fail": 0, "error": 0, "skip": 0})
    dtypes: list = field(default_factory=list)
    first_error: str | None = None
    skip_reason: str | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {
            "status": self.status,
            "counts": dict(self.counts),
            "dtypes": list(self.dtypes),
            "first_error": self.first_error,
            "skip_reason": self.skip_reason,
            "seconds": round(self.seconds, 3),
        }


def op_key(op) -> str:
    """The sweep's name for an OpInfo: `name` or `name.variant`."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def load_op_db():
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def parse_dtypes(spec: str | None) -> list[torch.dtype]:
    names = DEFAULT_DTYPES if not spec else [s.strip() for s in spec.split(",") if s.strip()]
    out = []
    for n in names:
        dt = getattr(torch, n, None)
        if not isinstance(dt, torch.dtype):
            raise ValueError(f"unknown dtype {n!r} (use torch dtype names: float32,bfloat16,int64,bool,...)")
        out.append(dt)
    return out


def dtypes_for(op, wanted: list[torch.dtype]) -> list[torch.dtype]:
    """The wanted dtypes this op supports on CPU; if none, one it does support."""
    supported = op.supported_dtypes("cpu")
    chosen = [d for d in wanted if d in supported]
    if not chosen and supported:
        for pref in (torch.float32, torch.float64, torch.int64, torch.bool, torch.complex64):
            if pref in supported:
                return [pref]
        chosen = [sorted(supported, key=str)[0]]
    return chosen


# ------------------------------------------------------------------ moving
def _check_claimed(t: torch.Tensor) -> None:
    if t.layout != torch.strided:
        raise SampleSkip(f"sample needs a {t.layout} tensor; flagos claims strided tensors only")
    if t.is_quantized:
        raise SampleSkip("sample needs a quantized tensor; flagos does not claim quantized tensors")
    if t.is_nested:
        raise SampleSkip("sample needs a nested tensor; flagos does not claim nested tensors")


def copy_exact(t: torch.Tensor, device: str) -> torch.Tensor:
    """A copy of `t` on `device` with the same sizes, strides, offset, conj/neg bits and requires_grad."""
    _check_claimed(t)
    if t.is_conj():
        return copy_exact(t.conj(), device).conj()
    if t.is_neg():
        return copy_exact(t._neg_view(), device)._neg_view()
    src = t.detach()
    nbytes = src.untyped_storage().nbytes()
    if nbytes % src.element_size() == 0 and src.numel() > 0:
        whole = src.new_empty(0).set_(src.untyped_storage(), 0, (nbytes // src.element_size(),), (1,))
        moved = whole.to(device).as_strided(src.size(), src.stride(), src.storage_offset())
    else:
        moved = src.to(device)
    if t.requires_grad:
        moved.requires_grad_(True)
    return moved


def tensor_to_flagos(t: torch.Tensor) -> torch.Tensor:
    """A flagos copy of `t`, byte for byte (see copy_exact)."""
    return copy_exact(t, DEVICE)


def _to_device_value(v, device: str):
    """Flagos tensors -> exact copies on `device`; a flagos device argument -> `device`. Others unchanged."""
    if isinstance(v, torch.Tensor):
        return copy_exact(v, device) if v.device.type == DEVICE else v
    if isinstance(v, torch.device) and v.type == DEVICE:
        return torch.device(device)
    if isinstance(v, str) and v.split(":")[0] == DEVICE:
        return device
    return v


def _to_cpu_value(v):
    return _to_device_value(v, "cpu")


def _to_cuda_value(v):
    return _to_device_value(v, "cuda")


def full_precision_on_cuda() -> None:
    """Gradients are compared with CPU fp32: no TF32 in CUDA matmuls and convolutions (cuDNN allows it by default)."""
    if forward_reference_device() == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        # Not the torch.backends.cudnn.allow_tf32 property: PyTorch's test
        # utilities lock it (disable_global_flags) once imported, as under pytest.
        torch._C._set_cudnn_allow_tf32(False)


def forward_reference_device() -> str:
    """Where the forward reference runs: the backing device's own kernels.

    On a CUDA backing flagos runs CUDA's kernels, so it is compared with
    native CUDA (same RNG stream, same sort order among ties, same dtype
    support); comparing with CPU would report CUDA-vs-CPU differences as
    flagos failures. Gradients are compared with CPU: native CUDA backward
    cannot run in a process that imported torch_fl (README, Limitations).
    """
    import torch_fl

    return torch_fl.backing()


def _mentions_flagos(tree) -> bool:
    for v in tree_flatten(tree)[0]:
        if isinstance(v, torch.Tensor) and v.device.type == DEVICE:
            return True
        if isinstance(v, torch.device) and v.type == DEVICE:
            return True
        if isinstance(v, str) and v.split(":")[0] == DEVICE:
            return True
    return False


NATIVE_DEVICE_TYPES = frozenset({"cpu", "cuda"})


def _names_native_device(tree) -> bool:
    """The sample names a native device itself (ones_like(x, device="cpu"), and device="cuda"
    where a GPU is present): outputs on that device are right, not flagos ones."""
    for v in tree_flatten(tree)[0]:
        if isinstance(v, torch.device) and v.type in NATIVE_DEVICE_TYPES:
            return True
        if isinstance(v, str) and v.split(":")[0] in NATIVE_DEVICE_TYPES:
            return True
    return False


def _check_sample_claimed(sample) -> None:
    for leaf in tree_flatten((sample.input, sample.args, sample.kwargs))[0]:
        if isinstance(leaf, torch.Tensor):
            _check_claimed(leaf)


# --------------------------------------------------------------- comparing
def _tolerance(op, dtype):
    """The OpInfo's toleranceOverride for test_compare_cpu, if it declares one for `dtype`."""
    for dec in getattr(op, "decorators", ()) or ():
        test_name = getattr(dec, "test_name", None)
        if test_name not in (None, "test_compare_cpu"):
            continue
        for fn in getattr(dec, "decorators", ()) or ():
            d = getattr(fn, "d", None)  # toleranceOverride keeps its dict in .d
            if isinstance(d, dict) and dtype in d:
                tol = d[dtype]
                return tol.rtol, tol.atol
    return None, None


def _devices_ok(actual, expected) -> str | None:
    """Every output the reference made on its device (CPU, or CUDA on a CUDA backing) is a flagos tensor."""
    flat_a, _ = tree_flatten(actual)
    flat_e, _ = tree_flatten(expected)
    ref = next((e.device.type for e in flat_e if isinstance(e, torch.Tensor) and e.device.type == "cuda"), "cpu")
    for i, (a, e) in enumerate(zip(flat_a, flat_e, strict=False)):
        if isinstance(e, torch.Tensor) and e.device.type == ref:
            if not isinstance(a, torch.Tensor):
                return f"output {i}: expected a tensor, got {type(a).__name__}"
            if a.device.type != DEVICE:
                return f"output {i} is on {a.device}, expected a flagos tensor"
    return None


def _to_cpu(v):
    return v.detach().cpu() if isinstance(v, torch.Tensor) else v


def compare(actual, expected, rtol=None, atol=None, metadata_only=False, native_outputs_ok=False) -> None:
    """Raise AssertionError unless the flagos result `actual` matches the reference `expected`."""
    bad = None if native_outputs_ok else _devices_ok(actual, expected)
    if bad:
        raise AssertionError(bad)
    actual = tree_map(_to_cpu, actual)
    expected = tree_map(_to_cpu, expected)
    if metadata_only:
        fa, fe = tree_flatten(actual)[0], tree_flatten(expected)[0]
        assert len(fa) == len(fe), f"{len(fa)} outputs, expected {len(fe)}"
        for a, e in zip(fa, fe, strict=True):
            if isinstance(e, torch.Tensor):
                assert a.shape == e.shape and a.dtype == e.dtype, f"{a.shape}/{a.dtype} vs {e.shape}/{e.dtype}"
        return
    kw = {} if rtol is None else {"rtol": rtol, "atol": atol}
    torch.testing.assert_close(actual, expected, equal_nan=True, check_device=False, **kw)


# ----------------------------------------------------------------- running
def _call(op, inp, args, kwargs):
    torch.manual_seed(SEED)
    return op(inp, *args, **kwargs)


def _grad_leaves(tree):
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor) and t.requires_grad]


def _backward(out, inputs, grads_out):
    outs = _grad_leaves(out)
    if not outs or not inputs:
        return None
    return torch.autograd.grad(outs, inputs, grads_out, allow_unused=True)


def _short(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else ""
    return f"{type(e).__name__}: {first}"[:400]


def run_sample(op, sample, *, backward: bool, rtol, atol, metadata_only: bool) -> tuple[str, str | None]:
    """Outcome of one sample generated on flagos: (status, message)."""
    try:
        _check_sample_claimed(sample)
    except SampleSkip as e:
        return "skip", str(e)
    f_inp, f_args, f_kwargs = sample.input, sample.args, sample.kwargs
    if not _mentions_flagos((f_inp, f_args, f_kwargs)):
        return "skip", "sample has no flagos tensor or device (it runs on CPU by construction)"
    # Reference copies first: the flagos run may modify its inputs in place.
    # The CPU run gives the forward reference on host backing and the
    # gradients everywhere; on a CUDA backing native CUDA gives the forward one.
    on_cuda = forward_reference_device() == "cuda"
    c_inp, c_args, c_kwargs = tree_map(_to_cpu_value, (f_inp, f_args, f_kwargs))
    expected = cpu_problem = None
    if backward or not on_cuda:
        try:
            expected = sample.output_process_fn_grad(_call(op, c_inp, c_args, c_kwargs))
        except Exception as e:  # the reference rejects the sample: nothing to compare
            if not on_cuda:
                return "skip", f"CPU reference raised {_short(e)}"
            cpu_problem = e
    forward_expected = expected
    if on_cuda:
        n_inp, n_args, n_kwargs = tree_map(_to_cuda_value, (f_inp, f_args, f_kwargs))
        try:
            with torch.no_grad():
                forward_expected = sample.output_process_fn_grad(_call(op, n_inp, n_args, n_kwargs))
        except Exception as e:  # native CUDA has no kernel for it (integer matmul, ...): nothing to compare
            return "skip", f"native cuda raised {_short(e)}"
    try:
        actual = sample.output_process_fn_grad(_call(op, f_inp, f_args, f_kwargs))
    except Exception as e:
        return "error", f"forward: {_short(e)}"
    try:
        native_ok = _names_native_device((f_args, f_kwargs))
        compare(actual, forward_expected, rtol, atol, metadata_only, native_outputs_ok=native_ok)
    except AssertionError as e:
        return "fail", f"forward: {_short(e)}"
    except Exception as e:
        return "error", f"compare: {_short(e)}"
    if not backward:
        return "pass", None
    if cpu_problem is not None:
        return "pass", f"backward not checked: CPU reference raised {_short(cpu_problem)}"

    cpu_in = _grad_leaves((c_inp, c_args, c_kwargs))
    outs = _grad_leaves(expected)
    if not cpu_in or not outs:
        return "pass", None
    if on_cuda:
        # CPU gradients are a reference for CUDA's only where the two forwards
        # agree: not for random ops (dropout masks) or results that are not
        # unique (singular vectors' signs, pivots). Tolerance as PyTorch's own
        # CUDA-vs-CPU test (TestCommon.test_compare_cpu): 1e-3 unless the OpInfo
        # declares one.
        if rtol is None:
            rtol, atol = CUDA_VS_CPU_TOLERANCE
        try:
            compare(expected, forward_expected, rtol, atol, metadata_only, native_outputs_ok=True)
        except AssertionError:
            return "pass", NOT_JUDGED_NOTE
    torch.manual_seed(SEED + 1)
    grads_out = [torch.randn_like(o) for o in outs]
    try:
        g_expected = _backward(expected, cpu_in, grads_out)
    except Exception as e:
        return "pass", f"backward not checked: CPU reference raised {_short(e)}"
    try:
        g_actual = _backward(actual, _grad_leaves((f_inp, f_args, f_kwargs)), [g.to(DEVICE) for g in grads_out])
    except Exception as e:
        return "error", f"backward: {_short(e)}"
    try:
        # A sample tensor that is a leaf *and* a view (istft's window[:8], made
        # under no_grad) gets no gradient from PyTorch on CPU either; its exact
        # CPU copy is a plain leaf and does. Compare the other gradients.
        keep = [not (t.is_leaf and t._base is not None) for t in _grad_leaves((f_inp, f_args, f_kwargs))]
        compare(
            [g for g, k in zip(g_actual, keep, strict=True) if k],
            [g for g, k in zip(g_expected, keep, strict=True) if k],
            rtol,
            atol,
            metadata_only,
        )
    except AssertionError as e:
        return "fail", f"backward: {_short(e)}"
    return "pass", None


def _generation_problem(op, dtype, grad: bool, e: Exception) -> tuple[str, str]:
    """Sample generation on flagos raised: an error if CPU generates the samples, else a skip."""
    try:
        next(iter(op.sample_inputs("cpu", dtype, requires_grad=grad)))
    except Exception as cpu_e:
        return "skip", f"{dtype}: sample generation raised on CPU too: {_short(cpu_e)}"
    return "error", f"{dtype}: sample generation on flagos raised {_short(e)}"


_RANK = {"skip": 0, "pass": 1, "fail": 2, "error": 3}


def run_op(op, dtypes: list[torch.dtype], *, limit: int | None = None, backward: bool = False) -> OpResult:
    """Run every (or the first `limit`) sample of `op` for each dtype; never raises."""
    res = OpResult(op_key(op))
    start = time.perf_counter()
    reasons = []
    metadata_only = op.name in UNINITIALISED_OUTPUT
    if op.name.startswith("sparse.") or op.name in SPARSE_OPS:
        res.skip_reason = "the op makes or needs sparse tensors; flagos claims strided tensors only"
        res.seconds = time.perf_counter() - start
        return res
    if op.name.startswith(CUDA_ONLY_PREFIXES):
        res.skip_reason = "torch.cuda.jiterator: a CUDA-only Python API that takes CUDA tensors, not an ATen operator"
        res.seconds = time.perf_counter() - start
        return res
    try:
        chosen = dtypes_for(op, dtypes)
        if not chosen:
            res.skip_reason = "no dtype supported on CPU"
        for dtype in chosen:
            res.dtypes.append(str(dtype).replace("torch.", ""))
            rtol, atol = _tolerance(op, dtype)
            grad = backward and op.supports_autograd and dtype in op.supported_backward_dtypes("cpu")
            torch.manual_seed(SEED)
            try:
                samples = iter(op.sample_inputs(DEVICE, dtype, requires_grad=grad))
            except Exception as e:
                samples, problem = iter(()), _generation_problem(op, dtype, grad, e)
            else:
                problem = None
            n = 0
            while problem is None and (limit is None or n < limit):
                try:
                    sample = next(samples)
                except StopIteration:
                    break
                except Exception as e:
                    problem = _generation_problem(op, dtype, grad, e)
                    break
                n += 1
                status, msg = run_sample(op, sample, backward=grad, rtol=rtol, atol=atol, metadata_only=metadata_only)
                res.counts[status] += 1
                if status in ("fail", "error") and res.first_error is None:
                    res.first_error = f"[{dtype} sample {n - 1}] {msg}"
                elif status == "skip" and msg:
                    reasons.append(msg)
                if _RANK[status] > _RANK[res.status]:
                    res.status = status
            if problem is not None:
                status, msg = problem
                res.counts[status] += 1
                if status == "error" and res.first_error is None:
                    res.first_error = msg
                elif status == "skip":
                    reasons.append(msg)
                if _RANK[status] > _RANK[res.status]:
                    res.status = status
    except Exception as e:  # a bug in the harness itself must not stop the sweep
        res.status = "error"
        res.first_error = f"harness: {_short(e)}\n{traceback.format_exc(limit=3)}"
    if res.status == "skip" and res.skip_reason is None:
        res.skip_reason = reasons[0] if reasons else "no sample inputs"
    res.seconds = time.perf_counter() - start
    return res
