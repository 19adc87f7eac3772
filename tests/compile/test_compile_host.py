"""torch.compile (inductor) on flagos: registration, an MLP training step, dynamic shapes, a tiny Qwen3,
generated code free of host copies, operators kept as routed calls (reduce-overhead: test_cudagraphs_host.py).

Every test runs on both backings: host memory in CI (inductor's C++ kernels), CUDA on a GPU (Triton kernels);
GPU-only expectations are in test_compile_cuda.py. Inductor's C++ compile is slow on a small machine, so
compiled artifacts are shared through module-scoped fixtures and the models are small.
"""

from __future__ import annotations

import re

import pytest
import torch

import torch_fl
from tests.compile.generated_code import call_body, run_and_get_code
from tests.helpers import run_python
from torch_fl import routing

pytestmark = pytest.mark.anyplatform

ON_CUDA = torch_fl.backing() == "cuda"
# What writing a host copy of a flagos tensor would look like in a generated wrapper or kernel call.
HOST_COPY = re.compile(
    r"device='cpu'|device\(type='cpu'|empty_strided_cpu\(|\.cpu\(\)|as_native\(|aten\._to_copy\.default\(|\.to\(device"
)


def _calls(rows) -> dict[str, int]:
    return {r.op: r.calls for r in rows if r.calls}


@pytest.fixture(scope="module")
def mlp_run():
    """One compiled training step of a small MLP (forward and AOTAutograd backward), fullgraph, and eager's."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to("flagos")
    x = torch.randn(8, 16, device="flagos")
    y = torch.randn(8, 4, device="flagos")

    def loss_fn(x, y):
        return torch.nn.functional.mse_loss(model(x), y)

    eager_loss = loss_fn(x, y)
    eager_loss.backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)

    compiled = torch.compile(loss_fn, fullgraph=True)

    def step():
        loss = compiled(x, y)
        loss.backward()
        return loss

    loss, codes = run_and_get_code(step)
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    routing.reset_stats()
    step()  # steady state: no compilation, only the compiled graphs' calls
    steady = _calls(routing.stats())
    with routing.route({"neg": "cpu_fallback"}):  # an operator routed away: the graphs' calls take their routes
        routing.reset_stats()
        step()
        routed = _calls(routing.stats())
    model.zero_grad(set_to_none=True)
    return {
        "loss": loss,
        "eager_loss": eager_loss,
        "grads": grads,
        "eager_grads": eager_grads,
        "codes": codes,
        "steady": steady,
        "routed": routed,
    }


def test_dynamo_and_inductor_know_flagos():
    from torch._dynamo.device_interface import get_interface_for_device
    from torch._inductor.codegen.common import (
        get_device_op_overrides,
        get_scheduling_for_device,
        init_backend_registration,
    )

    from torch_fl.compile.device_interface import FlagosInterface

    torch_fl.compile.register()
    iface = get_interface_for_device("flagos")
    assert iface is FlagosInterface
    assert iface.device_count() == torch.flagos.device_count()
    assert iface.current_device() == torch.flagos.current_device()
    assert iface.current_stream() == torch.flagos.current_stream()
    assert isinstance(iface.Event(), torch.Event) and iface.Event().device.type == "flagos"
    assert iface.Worker.get_device_properties("flagos:0") is not None
    prev = iface.exchange_device(torch.flagos.device_count() - 1)
    assert torch.flagos.current_device() == torch.flagos.device_count() - 1
    iface.maybe_exchange_device(prev)
    assert torch.flagos.current_device() == prev
    init_backend_registration()
    expected = "TritonScheduling" if ON_CUDA else "CppScheduling"
    assert get_scheduling_for_device("flagos").__name__ == expected
    assert get_device_op_overrides("flagos").device_guard(1) == "torch.flagos.device(1)"
    assert iface.is_triton_capable() is ON_CUDA


def test_pytorchs_own_device_lines_stay_registered():
    """Registering flagos's device lines first must not hide cuda's and cpu's (PyTorch 2.11 registers its own
    on the first lookup, only while none is registered): a cuda graph compiled beside flagos needs them."""
    proc = run_python(
        """
        import torch_fl
        from torch._inductor import compile_fx  # registers flagos with inductor
        from torch._inductor.codegen.common import get_device_op_overrides
        print(get_device_op_overrides("cuda").device_guard(0), get_device_op_overrides("flagos").device_guard(0))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["torch.cuda._DeviceGuard(0)", "torch.flagos.device(0)"]


def test_import_registers_lazily():
    """import torch_fl does not import Dynamo; importing it registers flagos."""
    proc = run_python(
        """
        import sys, torch_fl
        assert "torch._dynamo" not in sys.modules and "torch._inductor.compile_fx" not in sys.modules
        from torch._dynamo.device_interface import get_interface_for_device
        print(get_interface_for_device("flagos").__name__)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "FlagosInterface"


def test_mlp_training_step_matches_eager(mlp_run):
    torch.testing.assert_close(mlp_run["loss"], mlp_run["eager_loss"], rtol=1e-5, atol=1e-6)
    for got, want in zip(mlp_run["grads"], mlp_run["eager_grads"], strict=True):
        assert got.device.type == "flagos"
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_mlp_extern_matmuls_run_natively_or_on_their_routes(mlp_run):
    """Inductor keeps the matmuls as extern calls: the backing device's own while every route is native
    (test_native_graph.py), through the dispatcher on their flagos routes once one is not."""
    matmuls = ("addmm.out", "mm.out", "addmm", "mm")
    steady, routed = mlp_run["steady"], mlp_run["routed"]
    assert sum(steady.get(op, 0) for op in matmuls) == 0, steady
    assert sum(routed.get(op, 0) for op in matmuls) >= 3, routed
    # The pointwise work (GELU, mse) is fused into inductor's kernels: those operators are not called.
    for calls in (steady, routed):
        assert "gelu" not in calls and "gelu_backward" not in calls


def test_generated_code_has_flagos_buffers_and_no_host_copies(mlp_run):
    codes = mlp_run["codes"]
    assert len(codes) == 2  # the forward and the backward graph
    for code in codes:
        call = call_body(code)
        assert not HOST_COPY.search(call), HOST_COPY.search(call)
        # buffers come from torch_fl's C++ allocation function, on the graph's device index
        assert re.search(r"= graph_empty_strided\(\(.*\), \(.*\), torch\.\w+, 0\)", call)
        assert "from torch_fl._C import _graph_empty_strided as graph_empty_strided" in code
        assert not re.search(r"\bempty_strided\(", call)
        if ON_CUDA:
            assert "triton_" in code and "get_raw_stream" in code and "torch.flagos.device(" in code
        else:
            assert "cpp_fused" in code and "triton" not in code


def test_dynamic_shapes_on_the_last_device():
    torch._dynamo.reset()
    dev = f"flagos:{torch.flagos.device_count() - 1}"

    def fn(x):
        return torch.softmax(x * 2, dim=-1).sum(0)

    compiled = torch.compile(fn, dynamic=True, fullgraph=True)
    from torch._dynamo.utils import counters

    counters.clear()
    for n in (5, 9):
        x = torch.randn(n, 7, device=dev)
        out = compiled(x)
        assert out.device == torch.device(dev)
        torch.testing.assert_close(out, fn(x))
    assert counters["stats"]["unique_graphs"] == 1  # one graph for both sizes
    # the buffers of a graph on the last device are allocated there (index from the graph, sizes symbolic)
    index = torch.flagos.device_count() - 1
    torch._dynamo.reset()
    _, codes = run_and_get_code(torch.compile(fn, dynamic=True, fullgraph=True), torch.randn(5, 7, device=dev))
    assert re.search(rf"= graph_empty_strided\(.*\bs\w+.*, torch\.float32, {index}\)", codes[0])


@pytest.fixture(scope="module")
def silu_fn():
    def fn(x):
        return torch.nn.functional.silu(x) * 2 + 1

    return fn


def test_fused_operators_leave_their_routes(silu_fn):
    torch._dynamo.reset()
    x = torch.randn(4, 8, device="flagos")
    routing.reset_stats()
    out, (code,) = run_and_get_code(torch.compile(silu_fn, fullgraph=True), x)
    torch.testing.assert_close(out, silu_fn(x))
    assert "torch.ops.aten.silu" not in code  # no call of it (Triton kernels name it in comments)
    routing.reset_stats()
    torch.compile(silu_fn, fullgraph=True)(x)
    assert "silu" not in _calls(routing.stats())


def test_keep_as_calls_keeps_an_operator_on_its_route(silu_fn):
    torch._dynamo.reset()
    x = torch.randn(4, 8, device="flagos")
    with torch_fl.compile.keeping_calls(["silu"]):
        assert torch_fl.compile.kept_calls() == ["silu"]
        out, (code,) = run_and_get_code(torch.compile(silu_fn, fullgraph=True), x)
        routing.reset_stats()
        out = torch.compile(silu_fn, fullgraph=True)(x)
        assert _calls(routing.stats()).get("silu") == 1
    assert torch_fl.compile.kept_calls() == []
    torch.testing.assert_close(out, silu_fn(x))
    assert "torch.ops.aten.silu.default" in code
    torch._dynamo.reset()


def test_keep_as_calls_rejects_unknown_operators():
    with pytest.raises(torch_fl.vocab.errors.RoutingError, match="unknown operator 'silly'"):
        torch_fl.compile.keep_as_calls(["silly"])


def test_tiny_qwen3_forward_matches_eager():
    pytest.importorskip("transformers")
    from torch_fl.models import qwen3

    torch._dynamo.reset()
    model = qwen3.build("tiny", seed=0, num_hidden_layers=1).to("flagos")
    ids = qwen3.tokens(model.config.vocab_size, 2, 16, seed=1).to("flagos")
    with torch.no_grad():
        eager = model(input_ids=ids, use_cache=False).logits
        compiled = torch.compile(model, fullgraph=True)
        out, codes = run_and_get_code(lambda: compiled(input_ids=ids, use_cache=False).logits)
        routing.reset_stats()
        compiled(input_ids=ids, use_cache=False)
        steady = _calls(routing.stats())
        with routing.route({"neg": "cpu_fallback"}):  # an operator routed away: extern calls take their routes
            routing.reset_stats()
            routed_out = compiled(input_ids=ids, use_cache=False).logits
            routed = _calls(routing.stats())
    torch.testing.assert_close(out, eager, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(routed_out, eager, rtol=1e-4, atol=1e-4)
    call = "\n".join(call_body(code) for code in codes)
    assert not HOST_COPY.search(call), HOST_COPY.search(call)
    # SDPA and the matmuls: the backing device's own calls inside the graph, or on their flagos routes.
    assert not [op for op in steady if "attention" in op or op.startswith("mm")], steady
    assert [op for op in routed if "attention" in op], routed
    assert routed.get("mm.out", 0) + routed.get("mm", 0) > 0, routed


INPLACE_VIEWS = {
    "transpose_": lambda t: t.transpose_(1, 2),
    "t_": lambda t: t[0].t_(),
    "unsqueeze_": lambda t: t.unsqueeze_(0),
    "squeeze_": lambda t: t[:1].squeeze_(0),
    "squeeze_.dims": lambda t: t[:1, :1].squeeze_((0, 1)),
    "as_strided_": lambda t: t.as_strided_((4, 6), (48, 8)),
    "swapdims_": lambda t: t.swapdims_(0, 2),
}


@pytest.mark.parametrize("name", sorted(INPLACE_VIEWS))
def test_inplace_views_compile_and_keep_eager_semantics(name):
    """In-place views change only sizes and strides: compiled (functionalization replays them on tensors
    without data) and eager (the result is the input, with new metadata, sharing its memory)."""
    torch._dynamo.reset()
    op = INPLACE_VIEWS[name]
    x = torch.randn(4, 6, 8, device="flagos")
    y = x.clone()
    out = op(y)
    want = op(x.cpu().clone())
    assert (out.shape, out.stride(), out.device) == (want.shape, want.stride(), torch.device("flagos", 0))
    assert out.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    torch.testing.assert_close(out.cpu(), want)
    for backend in ("aot_eager", "inductor"):
        compiled = torch.compile(lambda t: op(t * 2), backend=backend)(x)
        torch.testing.assert_close(compiled.cpu(), op(x.cpu() * 2))


SCATTERS = {
    "scatter_add": lambda x, i, s: x.scatter_add(1, i, s),
    "scatter_add to one column": lambda x, i, s: x.scatter_add(1, torch.zeros_like(i), s),
    "scatter_reduce sum": lambda x, i, s: x.scatter_reduce(1, i, s, "sum"),
    "scatter_reduce amax": lambda x, i, s: x.scatter_reduce(1, i, s, "amax", include_self=False),
    "index_add": lambda x, i, s: x.index_add(0, i[0, :4], s[:4]),
    "index_put accumulate": lambda x, i, s: x.index_put((i[0],), s[0], accumulate=True),
}


@pytest.mark.parametrize("name", sorted(SCATTERS))
def test_scatters_with_colliding_indices_compile(name):
    """Accumulating scatters (indices that repeat) compile and match eager: on host backing inductor runs
    ATen's scatter-add for flagos as for the CPU (its C++ codegen failed an assertion on scatter_add)."""
    torch._dynamo.reset()
    fn = SCATTERS[name]
    x, src = torch.randn(8, 16, device="flagos"), torch.randn(8, 16, device="flagos")
    index = torch.randint(0, 4, (8, 16), device="flagos")
    out = torch.compile(fn, fullgraph=True)(x, index, src)
    torch.testing.assert_close(out.cpu(), fn(x.cpu(), index.cpu(), src.cpu()))


ARGREDUCES = {
    "argmax of a transpose": lambda t: t.transpose(1, 2).argmax(),
    "argmin of a transpose": lambda t: t.transpose(1, 2).argmin(),
    "argmax of a permutation over two dims": lambda t: t.permute(2, 0, 1).flatten(1).argmax(1),
    "max indices of a transposed slice": lambda t: torch.max(t[:, 1:].transpose(0, 2).reshape(-1), 0).indices,
}


@pytest.mark.parametrize("name", sorted(ARGREDUCES))
def test_argreductions_of_non_contiguous_inputs_compile(name):
    """argmax/argmin over several dimensions of a non-contiguous input give the position in the input's own
    shape, as eager does (on host backing inductor computed the position in memory for flagos: wrong indices,
    silently)."""
    torch._dynamo.reset()
    fn = ARGREDUCES[name]
    x = torch.randn(4, 6, 5, device="flagos")
    torch.testing.assert_close(torch.compile(fn, fullgraph=True)(x).cpu(), fn(x).cpu())


def test_aligned_attention_mask_pads_rows_to_eight_and_passes_gradients():
    from torch_fl.compile.attention import aligned_attention_mask

    bias = torch.randn(2, 3, 5, 39, device="flagos", requires_grad=True)
    out = aligned_attention_mask(bias, [2, 3, 5, 39], False)
    assert out.shape == bias.shape and out.stride() == (3 * 5 * 40, 5 * 40, 40, 1)
    assert torch.equal(out, bias)
    weight = torch.randn(bias.shape, device="flagos")
    (out * weight).sum().backward()
    assert torch.equal(bias.grad, weight)


def test_aligned_attention_mask_writes_out_broadcast_rows_and_sums_their_gradients():
    from torch_fl.compile.attention import aligned_attention_mask

    bias = torch.randn(1, 1, 1, 12, device="flagos", requires_grad=True)
    out = aligned_attention_mask(bias, [2, 4, 3, 12], False)
    assert out.stride() == (4 * 3 * 16, 3 * 16, 16, 1)
    assert torch.equal(out, bias.expand(2, 4, 3, 12))
    out.sum().backward()
    assert torch.equal(bias.grad, torch.full_like(bias, 24.0))


def test_aligned_attention_mask_keeps_batch_and_heads_broadcast_as_pytorchs_sdpa():
    # The memory-efficient kernel checks the mask's sizes against the attention's: [1, 1, M, N] expanded (stride 0)
    from torch_fl.compile.attention import aligned_attention_mask

    mask = torch.randn(1, 1, 1, 39, device="flagos")
    out = aligned_attention_mask(mask, [2, 4, 1, 39], True)
    assert out.shape == (2, 4, 1, 39) and out.stride() == (0, 0, 40, 1)
    assert torch.equal(out, mask.expand(2, 4, 1, 39))


# torch.flagos's device queries under Dynamo, as torch.cuda's (torch_fl/compile/device_api.py).
DEVICE_QUERIES = {
    "current_device": lambda t: t + torch.flagos.current_device(),
    "device_count": lambda t: t * torch.flagos.device_count(),
    "is_available": lambda t: t + 1 if torch.flagos.is_available() else t - 1,
}


@pytest.mark.parametrize("name", sorted(DEVICE_QUERIES))
def test_device_queries_trace_without_graph_breaks(name):
    """torch.flagos.current_device/device_count/is_available are folded into the graph (the first stopped
    Dynamo at torch_fl._C's pybind function, a graph break: an error under fullgraph)."""
    torch._dynamo.reset()
    fn = DEVICE_QUERIES[name]
    x = torch.randn(4, device="flagos")
    torch.testing.assert_close(torch.compile(fn, fullgraph=True)(x), fn(x))


def test_folded_current_device_is_guarded():
    """The folded device index is guarded as torch.cuda.current_device's is: another current device
    recompiles instead of reusing a graph with a stale index."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    last = torch.flagos.device_count() - 1
    counter = CompileCounter()
    compiled = torch.compile(lambda t: t * 0 + torch.flagos.current_device(), fullgraph=True, backend=counter)
    x = torch.zeros(2, device="flagos")
    assert compiled(x).tolist() == [0.0, 0.0]
    with torch.flagos.device(last):
        assert compiled(x).tolist() == [float(last)] * 2
    assert compiled(x).tolist() == [0.0, 0.0]
    assert counter.frame_count == (2 if last else 1)


@pytest.mark.parametrize("device", [None, 0, "flagos", "flagos:0", torch.device("flagos", 0)])
def test_current_stream_traces(device):
    torch._dynamo.reset()

    def fn(t):
        return t + 1, torch.flagos.current_stream(device)

    x = torch.randn(4, device="flagos")
    out, stream = torch.compile(fn, fullgraph=True)(x)
    want_out, want_stream = fn(x)
    torch.testing.assert_close(out, want_out)
    assert stream == want_stream and stream.device == torch.device("flagos", 0)


@pytest.mark.skipif(torch.flagos.device_count() < 2, reason="needs two flagos devices (FLAGOS_HOST_DEVICES=2)")
def test_current_stream_of_another_device_is_a_graph_break():
    """Dynamo's stream stack would answer with the current device's stream, silently (as it does for
    torch.cuda.current_stream(1)): flagos's is a graph break there (an error under fullgraph) and runs eagerly."""
    torch._dynamo.reset()
    x = torch.randn(4, device="flagos")

    def fn(t):
        return t + 1, torch.flagos.current_stream(1)

    with pytest.raises(torch._dynamo.exc.Unsupported, match="other than the current one runs eagerly"):
        torch.compile(fn, fullgraph=True, backend="eager")(x)
    torch._dynamo.reset()
    _, stream = torch.compile(fn, backend="eager")(x)
    assert stream == torch.flagos.current_stream(1) and stream.device == torch.device("flagos", 1)


def test_stream_context_compiles_as_a_graph_break():
    torch._dynamo.reset()
    side = torch.flagos.Stream()

    def fn(t):
        with torch.flagos.stream(side):
            y = t * 2
        return y + 1

    x = torch.randn(4, device="flagos")
    torch.testing.assert_close(torch.compile(fn)(x), x * 2 + 1)


def test_inductor_allocation_function_places_buffers_and_names_bad_arguments():
    from torch_fl._C import _graph_empty_strided, _graph_inputs

    _graph_inputs([], False)  # this thread's graph runs on its routes: flagos buffers
    t = _graph_empty_strided((4, 6), (1, 4), torch.float16, -1)
    assert (t.device, t.shape, t.stride(), t.dtype) == (torch.device("flagos", 0), (4, 6), (1, 4), torch.float16)
    last = torch.flagos.device_count() - 1
    assert _graph_empty_strided([3], [1], torch.int64, last).device == torch.device("flagos", last)
    with pytest.raises(TypeError, match="size must be a tuple of ints, got float at position 1"):
        _graph_empty_strided((4, 2.0), (2, 1), torch.float32, 0)
    with pytest.raises(TypeError, match="dtype must be a torch.dtype"):
        _graph_empty_strided((4,), (1,), "float32", 0)
    with pytest.raises(RuntimeError, match="2 sizes and 1 strides"):
        _graph_empty_strided((4, 2), (1,), torch.float32, 0)
    with pytest.raises(torch.AcceleratorError, match="out of range"):
        _graph_empty_strided((4,), (1,), torch.float32, last + 1)
    _graph_inputs([], True)  # one that runs natively inside: the backing device's buffers
    native = _graph_empty_strided((4, 6), (1, 4), torch.float16, 0)
    assert native.device.type == torch_fl.backing() and native.stride() == (1, 4)
    _graph_inputs([], False)
