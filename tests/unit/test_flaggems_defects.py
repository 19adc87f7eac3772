"""Known FlagGems defects (torch_fl/backends/flaggems_defects.py): the calls a FlagGems function gets wrong
never reach it; they run natively, counted and warned. Host tests with stand-ins defined in files of the real
functions' paths and imported under the module names FlagGems gives them (`hopper.ops.mul`); a GPU test
checks the real FlagGems table on Hopper.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from tests.unit.routing_fixtures import flag_gems_with
from torch_fl import routing
from torch_fl.backends import flaggems, flaggems_defects
from torch_fl.vocab.errors import FallbackWarning

pytestmark = pytest.mark.anyplatform


FLAG_GEMS = "/venv/site-packages/flag_gems/"


def flag_gems_function(file: str, source: str, name: str, module: str | None = None, **names):
    """`name` from `source`, compiled as if from FlagGems' `file` (a path under the flag_gems package) and
    imported as `module` (FlagGems imports its per-architecture ops as top-level modules)."""
    module = module or "flag_gems." + file.removesuffix(".py").replace("/", ".")
    scope = {"torch": torch, "__name__": module, **names}
    exec(compile(source, FLAG_GEMS + file, "exec"), scope)
    return scope[name]


def hopper_function(file: str, source: str, name: str, **names):
    """`name` from `source`, as FlagGems' Hopper ops `file` defines it (imported as `hopper.ops.<file>`)."""
    hopper = "runtime/backend/_nvidia/hopper/ops/"
    return flag_gems_function(hopper + file, source, name, f"hopper.ops.{file.removesuffix('.py')}", **names)


def row(op, backend):
    return next((s for s in routing.stats() if s.op == op and s.backend == backend), None)


@pytest.mark.parametrize("route", ["flaggems", "flagos_python"], ids=["replay", "python_path"])
def test_a_known_flaggems_defect_is_refused_before_it_runs(routing_state, route):
    """FlagGems 5.0.2's Hopper mul reads two same-rank tensors as flat arrays of one shape: on a broadcast
    (Qwen3's q * cos) it faults the GPU. Such calls never reach it: they run natively, counted and warned
    (replay checks when it records a signature)."""
    calls = []
    source = "def mul(A, B):\n    calls.append(type(B).__name__)\n    return torch.mul(A, B)\n"
    mul = hopper_function("mul.py", source, "mul", calls=calls)
    flaggems.LOADER.use_module(flag_gems_with({"mul.Tensor": mul}))
    try:
        routing.reset_stats()
        routing.set_route("mul.Tensor", route)
        a = torch.arange(6.0, device="flagos").reshape(2, 3)
        assert torch.equal((a * a).cpu(), a.cpu() * a.cpu()) and calls == ["Tensor"]  # what it gets right
        assert torch.equal((a * 2).cpu(), a.cpu() * 2) and calls == ["Tensor", "int"]  # its general kernel
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            col = torch.ones(2, 1, device="flagos")
            assert torch.equal((a * col).cpu(), a.cpu())  # a broadcast, natively
            assert torch.equal((a.t() * a.t()).cpu(), (a.cpu() * a.cpu()).t())  # strided
        assert calls == ["Tensor", "int"]
        msgs = [str(m.message) for m in w if issubclass(m.category, FallbackWarning)]
        assert len(msgs) == 1 and "Hopper mul" in msgs[0] and "(2, 3)" in msgs[0] and "(2, 1)" in msgs[0]
        stat = "flaggems" if route == "flaggems" else "flaggems_python"  # stats use the canonical name
        assert row("mul.Tensor", stat) == routing.OpStat("mul.Tensor", stat, 3, 2, 1)
    finally:
        flaggems.LOADER.reset()


@pytest.mark.parametrize(
    ("a", "b", "refused"),
    [
        (torch.ones(4, 4), torch.ones(4, 4), False),
        (torch.ones(4, 4), torch.ones(4), False),  # ranks differ: FlagGems' broadcasting kernel
        (torch.ones(4, 4), torch.ones(1, 4), True),
        (torch.ones(4, 4), torch.ones(4, 4, dtype=torch.bfloat16), True),
        (torch.ones(4, 4), torch.ones(4, 4).t(), True),
        (torch.ones(()), torch.ones(()), False),
        ("flagos", torch.ones(()), True),  # a host scalar tensor: its kernel would read host memory
    ],
)
def test_the_hopper_mul_check(a, b, refused):
    a = torch.ones((), device=a) if isinstance(a, str) else a
    mul = hopper_function("mul.py", "def mul(A, B):\n    return A * B\n", "mul")
    checked = flaggems_defects.guarded(mul)
    assert checked is not mul and flaggems_defects.guarded(torch.mul) is torch.mul
    for fn in (mul, checked):  # refusal() answers for the function and for its guarded wrapper
        assert (flaggems_defects.refusal(fn, a, b) is not None) == refused
    assert flaggems_defects.refusal(torch.mul, a, b) is None
    if refused:
        with pytest.raises(flaggems_defects.FlagGemsDefect, match="flat arrays"):
            checked(a, b)
    else:
        assert torch.equal(checked(a, b).cpu(), (a * b).cpu())


def test_defects_are_matched_by_file_and_name_not_module():
    """FlagGems imports its Hopper ops as `hopper.ops.mul`; a function of that name elsewhere is not matched,
    nor one that a release moved to another file."""
    mul = hopper_function("mul.py", "def mul(A, B):\n    return A * B\n", "mul")
    assert mul.__module__ == "hopper.ops.mul"
    assert flaggems_defects.location(mul) == ("runtime/backend/_nvidia/hopper/ops/mul.py", "mul")
    assert flaggems_defects.guarded(mul) is not mul
    moved = hopper_function("mul2.py", "def mul(A, B):\n    return A * B\n", "mul")
    assert flaggems_defects.guarded(moved) is moved
    assert flaggems_defects.location(torch.mul) is None and flaggems_defects.guarded(torch.mul) is torch.mul


@pytest.mark.parametrize(
    ("file", "name", "call", "refused"),
    [
        ("sqrt.py", "sqrt", lambda f: f(torch.ones(4, 4)), False),
        ("sqrt.py", "sqrt", lambda f: f(torch.ones(4, 8)[:, :4]), True),  # strided: wrong elements
        ("sqrt.py", "sqrt", lambda f: f(torch.ones(4).expand(4, 4)), True),  # expanded: reads past its storage
        ("sqrt.py", "sqrt", lambda f: f(torch.ones(4, dtype=torch.int64)), True),  # PyTorch promotes to float
        ("sqrt.py", "sqrt_", lambda f: f(torch.ones(4, 4).t()), True),
        ("fill.py", "fill_scalar_", lambda f: f(torch.ones(4, 4), 2.0), False),
        ("fill.py", "fill_scalar_", lambda f: f(torch.ones(4, 8)[:, :4], 2.0), True),  # writes outside the view
        ("fill.py", "fill_tensor_", lambda f: f(torch.ones(4, 8)[:, :4], torch.tensor(2.0)), True),
        ("fill.py", "fill_scalar_out", lambda f: f(torch.ones(4, 8)[:, :4], 2.0), False),  # out= decides
        ("fill.py", "fill_scalar_out", lambda f: f(torch.ones(4), 2.0, out=torch.ones(4, 8)[:, :4]), True),
        ("fill.py", "fill_tensor_out", lambda f: f(torch.ones(4), torch.tensor(2.0), out=torch.ones(8)[::2]), True),
    ],
)
def test_the_hopper_flat_kernel_checks(file, name, call, refused):
    """FlagGems 5.0.2's Hopper sqrt and fill run one flat kernel over the element count, ignoring strides."""
    fn = hopper_function(file, f"def {name}(*args, **kwargs):\n    return 'ran'\n", name)
    checked = flaggems_defects.guarded(fn)
    if refused:
        with pytest.raises(flaggems_defects.FlagGemsDefect, match="flat kernel"):
            call(checked)
    else:
        assert call(checked) == "ran"


@pytest.mark.flaggems
def test_the_real_hopper_mul_is_guarded():
    """On a Hopper GPU FlagGems' table maps mul.Tensor to its Hopper mul: that function must be the guarded
    one (it was not matched while defects were keyed by module name)."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("FlagGems uses its Hopper mul only on compute capability 9.0")
    flaggems.LOADER.load()
    if flaggems.LOADER.reason:
        pytest.skip(flaggems.LOADER.reason)
    fn = flaggems.LOADER.table["mul.Tensor"]
    assert flaggems_defects.location(getattr(fn, "__wrapped__", fn)) == (
        "runtime/backend/_nvidia/hopper/ops/mul.py",
        "mul",
    )
    assert fn is not getattr(fn, "__wrapped__", fn)
    with pytest.raises(flaggems_defects.FlagGemsDefect):
        fn(torch.ones(2, 3, device="cuda"), torch.ones(2, 1, device="cuda"))


@pytest.mark.flaggems
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_real_flaggems_layer_norm_matches_the_native_route(routing_state, dtype):
    """FlagGems' own layer_norm and layer_norm_backward on a GPU, on flat rows and on a (batch, sequence, hidden)
    input as GPT-2's blocks give it: statistics, outputs and gradients as the native route (CUDA's kernels) gives
    them, the calls FlagGems gets wrong run natively. (The reference runs on flagos: backward over CUDA tensors
    cannot run in a process that imported torch_fl.)"""
    if not torch.cuda.is_available():
        pytest.skip("FlagGems' kernels need a CUDA GPU")
    flaggems.LOADER.load()
    if flaggems.LOADER.reason:
        pytest.skip(flaggems.LOADER.reason)
    ops = ("native_layer_norm", "native_layer_norm_backward")
    gen = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*s, generator=gen).to(dtype) for s in ((4, 33, 256), (256,), (256,)))

    def run(rows):
        leaves = [t.to("flagos").requires_grad_() for t in (rows, w, b)]
        stats = torch.native_layer_norm(leaves[0].detach(), [256], w.to("flagos"), b.to("flagos"), 1e-5)
        torch.nn.functional.layer_norm(leaves[0], (256,), leaves[1], leaves[2]).float().pow(2).sum().backward()
        return [t.cpu() for t in stats] + [t.grad.cpu() for t in leaves]

    for op in ops:
        routing.set_route(op, "flaggems")
    routing.reset_stats()
    warnings.simplefilter("ignore", FallbackWarning)  # counted below; pytest restores the filters
    # the backward check passes the flat rows and refuses the (batch, sequence, hidden) input, and with it every
    # later call of that dtype
    for rows in (x.reshape(-1, 256), x):
        with routing.route(dict.fromkeys(ops, "native")):
            want = run(rows)
        got = run(rows)
        for g, e in zip(got, want, strict=True):
            assert g.shape == e.shape and g.dtype == e.dtype
            atol, rtol = (5e-2, 1e-2) if dtype == torch.bfloat16 else (1e-3, 1e-3)
            torch.testing.assert_close(g.float(), e.float(), atol=atol, rtol=rtol)
    forward, backward = row("native_layer_norm", "flaggems"), row("native_layer_norm_backward", "flaggems")
    assert (backward.calls, backward.failures, backward.fallbacks) == (2, 1, 1)  # ran on the rows, then refused
    if dtype == torch.float32:  # FlagGems ran every forward
        assert forward.calls == 4 and forward.fallbacks == 0
    else:  # statistics kept in bfloat16: every forward ran natively
        assert forward.fallbacks == 4


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int16])
def test_index_add_of_a_dtype_triton_has_no_atomic_add_for_runs_natively(routing_state, dtype):
    """FlagGems' index_add_ fails to compile (Triton's atomic_add has no 8- or 16-bit integer form): refused
    before anything runs, the in-place call runs natively, counted and warned, where it raised before."""
    calls = []
    source = "def index_add_(inp, dim, index, src, alpha=1):\n    calls.append(inp.dtype)\n    return inp\n"
    fn = flag_gems_function("ops/index_add.py", source, "index_add_", calls=calls)
    flaggems.LOADER.use_module(flag_gems_with({"index_add_": fn}))
    try:
        routing.reset_stats()
        routing.set_route("index_add_", "flagos_python")
        index = torch.tensor([0, 0, 2], device="flagos")
        x = torch.zeros(3, dtype=dtype, device="flagos")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            x.index_add_(0, index, torch.ones(3, dtype=dtype, device="flagos"))
        want = torch.zeros(3, dtype=dtype).index_add_(0, index.cpu(), torch.ones(3, dtype=dtype))
        assert torch.equal(x.cpu(), want) and calls == []
        msgs = [str(m.message) for m in w if issubclass(m.category, FallbackWarning)]
        assert len(msgs) == 1 and "atomic_add" in msgs[0]
        y = torch.zeros(3, device="flagos")  # float32 has an atomic_add: FlagGems runs it
        y.index_add_(0, index, torch.ones(3, device="flagos"))
        assert calls == [torch.float32]
    finally:
        flaggems.LOADER.reset()


@pytest.mark.parametrize(
    ("op", "name", "call"),
    [
        ("mul_.Tensor", "mul_", lambda x: x.mul_(torch.tensor(1.5, device=x.device))),
        ("clamp_", "clamp_", lambda x: x.bool().clamp_(min=1, max=1)),
        ("add.out", "add_out", lambda x: torch.add(x, 0.5, out=x)),
        # rejected by their dtypes (the meta kernel's verdict), in place or not
        ("neg_", "neg_", lambda x: x.bool().neg_()),
        ("neg", "neg", lambda x: torch.neg(x.bool())),
    ],
)
def test_in_place_and_out_calls_pytorch_rejects_raise_pytorchs_error(routing_state, op, name, call):
    """FlagGems' pointwise kernels do not all check dtypes: an int64 `x.mul_(float)` ran on them where CUDA
    raises "result type Float can't be cast to the desired output type Long", a bool `neg_` where it raises
    "Negation ... on a bool tensor is not supported". Such calls never reach FlagGems; the native route
    raises PyTorch's error and writes nothing."""
    calls = []
    fn = flag_gems_function("ops/stand_in.py", f"def {name}(*a, **k):\n    calls.append(1)\n", name, calls=calls)
    flaggems.LOADER.use_module(flag_gems_with({op: fn}))
    try:
        routing.set_route(op, "flagos_python")
        x = torch.arange(3, device="flagos")
        cpu_error = None
        try:
            call(x.cpu())
        except RuntimeError as e:
            cpu_error = str(e)
        assert cpu_error is not None
        with pytest.raises(RuntimeError) as raised:
            call(x)
        assert str(raised.value) == cpu_error and calls == [] and x.cpu().tolist() == [0, 1, 2]
        assert row(op, "flaggems_python") is None or row(op, "flaggems_python").fallbacks == 0
    finally:
        flaggems.LOADER.reset()


@pytest.mark.parametrize(
    ("what", "self_dtype", "values_dtype", "index_dtype", "accumulate"),
    [
        ("values of another dtype", torch.int8, torch.int32, torch.int64, False),
        ("an int8 index (FlagGems: a mask)", torch.float32, torch.float32, torch.int8, False),
        ("a uint8 mask (FlagGems: indices)", torch.float32, torch.float32, torch.uint8, False),
        ("accumulate into int8 (no atomic_add)", torch.int8, torch.int8, torch.int64, True),
    ],
)
def test_index_put_calls_flaggems_gets_wrong_never_reach_it(
    routing_state, what, self_dtype, values_dtype, index_dtype, accumulate
):
    """FlagGems' index_put_ wrote int32 values into an int8 tensor where PyTorch raises, read an int8 index
    as a mask and a uint8 mask as indices, and failed to compile an int8 accumulation (the differential
    fuzzer's seeds 291 and 402 on the H200). Each runs as the native route runs it: PyTorch's result or
    PyTorch's error, nothing written by FlagGems."""
    calls = []
    source = "def index_put_(inp, indices, values, accumulate=False):\n    calls.append(1)\n    return inp\n"
    fn = flag_gems_function("ops/index_put.py", source, "index_put_", calls=calls)
    flaggems.LOADER.use_module(flag_gems_with({"index_put_": fn}))
    try:
        routing.set_route("index_put_", "flagos_python")
        index = torch.tensor([1, 0, 1]).to(index_dtype)
        x, values = torch.arange(3).to(self_dtype), torch.tensor([5, 6, 7]).to(values_dtype)

        def call(d):
            t = x.clone().to(d)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t.index_put_((index.to(d),), values.to(d), accumulate=accumulate)
            except (RuntimeError, IndexError) as e:
                return type(e), str(e)
            return t.cpu()

        want, got = call("cpu"), call("flagos")
        assert calls == []
        if isinstance(want, tuple):
            assert got == want
        else:
            assert torch.equal(got, want)
        y = torch.zeros(3, device="flagos")  # a call FlagGems gets right reaches it
        y.index_put_((torch.tensor([0, 2], device="flagos"),), torch.ones(2, device="flagos"))
        assert calls == [1]
    finally:
        flaggems.LOADER.reset()


def test_a_result_flaggems_hands_back_over_an_input_is_a_new_tensor(routing_state):
    """FlagGems' cat of one tensor returns that tensor: writing to `torch.cat([x])` wrote to x (the fuzzer's
    seed 325). An operator whose results PyTorch makes new gets a copy; a view operator keeps its view."""
    source = "def cat(tensors, dim=0):\n    return tensors[0] if len(tensors) == 1 else torch.cat(tensors, dim)\n"
    fn = flag_gems_function("ops/cat.py", source, "cat")
    flaggems.LOADER.use_module(flag_gems_with({"cat": fn}))
    try:
        routing.set_route("cat", "flagos_python")
        x = torch.arange(6.0, device="flagos").reshape(2, 3)
        for inp, want_strides in ((x, (3, 1)), (x.t(), (2, 1))):
            y = torch.cat([inp])
            assert y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
            assert y.stride() == want_strides and torch.equal(y.cpu(), inp.cpu())
            y.add_(100)
            assert x.cpu().tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
        assert torch.equal(torch.cat([x, x]).cpu(), torch.cat([x.cpu(), x.cpu()]))
    finally:
        flaggems.LOADER.reset()


def test_fresh_results_is_made_for_operators_with_new_results_only():
    from torch_fl.backends.call_checks import fresh_results

    assert fresh_results("cat") is not None and fresh_results("add.Tensor") is not None
    assert fresh_results("view") is None and fresh_results("add_.Tensor") is None
    assert fresh_results("add.out") is None and fresh_results("transpose.int") is None


# FlagGems 5.0.2's layer_norm as far as its results go: the statistics flat, one per row, in the input's dtype.
FLAT_STATS_LAYER_NORM = """
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    calls.append(input.dtype)
    rows = input.numel() // math.prod(normalized_shape)
    x = input.reshape(rows, -1).float()
    mean, rstd = x.mean(1), torch.rsqrt(x.var(1, unbiased=False) + eps)
    y = ((x - mean[:, None]) * rstd[:, None]).reshape(input.shape)
    y = y if weight is None else y * weight
    y = y if bias is None else y + bias
    return y.to(input.dtype), mean.to(input.dtype), rstd.to(input.dtype)
"""


@pytest.mark.parametrize("route", ["flaggems", "flagos_python"], ids=["replay", "python_path"])
def test_flaggems_layer_norm_gives_pytorchs_statistics_and_leaves_half_inputs_native(routing_state, route):
    """Its mean and rstd come back viewed as PyTorch's (the input's leading dimensions, then a 1 per normalized
    one), which autograd saves for PyTorch's backward; a bfloat16 input, whose statistics it would keep in
    bfloat16 where PyTorch keeps float32, runs natively, counted and warned."""
    import math

    calls = []
    fn = flag_gems_function("ops/layernorm.py", FLAT_STATS_LAYER_NORM, "layer_norm", calls=calls, math=math)
    flaggems.LOADER.use_module(flag_gems_with({"native_layer_norm": fn}))
    try:
        routing.reset_stats()
        routing.set_route("native_layer_norm", route)
        gen = torch.Generator().manual_seed(0)
        x, w, b = torch.randn(2, 3, 8, generator=gen), torch.randn(8, generator=gen), torch.randn(8, generator=gen)
        want = torch.native_layer_norm(x, [8], w, b, 1e-5)
        for _ in range(2):  # replay: the signature recorded, then replayed
            got = torch.native_layer_norm(x.to("flagos"), [8], w.to("flagos"), b.to("flagos"), 1e-5)
            for g, e in zip(got, want, strict=True):
                assert g.shape == e.shape and g.dtype == e.dtype and g.device.type == "flagos"
                torch.testing.assert_close(g.cpu(), e)
        calls.clear()
        xf, xc = x.to("flagos").requires_grad_(), x.clone().requires_grad_()
        torch.nn.functional.layer_norm(xf, (8,), w.to("flagos"), b.to("flagos")).pow(2).sum().backward()
        torch.nn.functional.layer_norm(xc, (8,), w, b).pow(2).sum().backward()
        # its statistics round differently from PyTorch's: the gradients agree to float32 rounding, not bit for bit
        torch.testing.assert_close(xf.grad.cpu(), xc.grad, atol=1e-4, rtol=1e-4)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            half = torch.nn.functional.layer_norm(x.bfloat16().to("flagos"), (8,))
        assert torch.bfloat16 not in calls  # the bfloat16 call never reached it
        torch.testing.assert_close(half.cpu(), torch.nn.functional.layer_norm(x.bfloat16(), (8,)))
        msgs = [str(m.message) for m in seen if issubclass(m.category, FallbackWarning)]
        assert len(msgs) == 1 and "float32 for the backward" in msgs[0]
    finally:
        flaggems.LOADER.reset()


@pytest.mark.parametrize(
    ("shape", "normalized", "refused"),
    [
        ((4, 8), (8,), False),
        ((2, 3, 8), (3, 8), False),  # every dimension after the first: its rows are right
        ((1, 1, 8), (8,), False),
        ((2, 3, 8), (8,), True),  # a (batch, sequence, hidden) activation: 2 rows taken for 6
        ((1, 3, 8), (8,), True),
    ],
)
def test_the_layer_norm_backward_check(shape, normalized, refused):
    """FlagGems 5.0.2's layer_norm_backward takes the input's first dimension for its rows (GPT-2's training
    step faulted the GPU): only inputs normalized over every other dimension reach it."""
    source = "def layer_norm_backward(*args, **kwargs):\n    return 'ran'\n"
    checked = flaggems_defects.guarded(flag_gems_function("ops/layernorm.py", source, "layer_norm_backward"))
    x, stats = torch.ones(shape), torch.ones(1)
    args = (torch.ones(shape), x, list(normalized), stats, stats, None, None, [True, True, True])
    if refused:
        with pytest.raises(flaggems_defects.FlagGemsDefect, match="read past the end of weight"):
            checked(*args)
    else:
        assert checked(*args) == "ran"
