"""CUDA graphs on flagos (torch_fl/flagos/graphs.py, docs/graphs.md): the torch.cuda-shaped API, capture and
replay per route kind, the CPU fallback's capture error, memory over replays, make_graphed_callables,
whole-step training capture, torch.accelerator.Graph, and graph decoding (torch_fl/models/graph_decode.py).
Host backing: every graph name raises naming the CUDA requirement."""

from __future__ import annotations

import copy
import inspect
import subprocess
import sys

import pytest
import torch

import torch_fl
from tests.conftest import ON_CUDA
from torch_fl import routing

flagos = torch.flagos
HAS_ACCELERATOR_GRAPH = hasattr(torch.accelerator, "Graph")  # torch >= 2.12

ON_HOST = pytest.mark.skipif(ON_CUDA, reason="host backing's errors")


# ---------------------------------------------------------------- the API, and host backing's errors


@pytest.mark.anyplatform
@pytest.mark.parametrize("name", ["graph", "make_graphed_callables"])
def test_graph_functions_take_torch_cudas_parameters(name):
    ours = [p.name for p in inspect.signature(getattr(flagos, name)).parameters.values() if p.kind != p.VAR_KEYWORD]
    theirs = list(inspect.signature(getattr(torch.cuda, name)).parameters)
    assert theirs[: len(ours)] == ours, (ours, theirs)


@pytest.mark.anyplatform
def test_cudagraph_is_a_torch_cuda_graph_and_graphs_is_the_module():
    assert issubclass(flagos.CUDAGraph, torch.cuda.CUDAGraph)
    assert issubclass(flagos.graph, torch.cuda.graph)
    assert flagos.graphs.CUDAGraph is flagos.CUDAGraph


@pytest.mark.anyplatform
@ON_HOST
@pytest.mark.parametrize(
    "name,call",
    [
        ("CUDAGraph", lambda: flagos.CUDAGraph()),
        ("graph", lambda: flagos.graph(None)),
        ("graph_pool_handle", lambda: flagos.graph_pool_handle()),
        (
            "make_graphed_callables",
            lambda: flagos.make_graphed_callables(
                torch.nn.Linear(2, 2).to("flagos"), (torch.randn(2, 2, device="flagos"),)
            ),
        ),
    ],
)
def test_host_backing_names_the_cuda_requirement(name, call):
    with pytest.raises(RuntimeError, match=rf"torch.flagos.{name} needs a CUDA backing: a CUDA graph captures"):
        call()


@pytest.mark.anyplatform
@ON_HOST
@pytest.mark.skipif(not HAS_ACCELERATOR_GRAPH, reason="this torch has no torch.accelerator.Graph (2.11)")
def test_accelerator_graph_is_flagos_s_and_names_the_cuda_requirement():
    # Without flagos's registration torch says "Graph is not supported on device type: flagos".
    with pytest.raises(RuntimeError, match="torch.accelerator.Graph on flagos needs a CUDA backing"):
        torch.accelerator.Graph()


@pytest.mark.anyplatform
def test_graph_rejects_what_is_not_a_graph_or_a_stream():
    if not ON_CUDA:
        pytest.skip("host backing raises before looking at the arguments (tested above)")
    with pytest.raises(TypeError, match="expected a torch.flagos.CUDAGraph"):
        flagos.graph(object())
    with pytest.raises(TypeError, match="expected a flagos stream"):
        flagos.graph(flagos.CUDAGraph(), stream="s")


@pytest.mark.anyplatform
@ON_HOST
def test_demo_graphs_on_host_says_it_needs_a_cuda_backing():
    p = subprocess.run(
        [sys.executable, "-m", "torch_fl", "demo", "--graphs"], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 2 and "demo --graphs needs a CUDA backing" in p.stderr, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr


@pytest.mark.cuda
def test_demo_graphs_decodes_with_graphs_on_both_sides():
    pytest.importorskip("transformers")
    cmd = [sys.executable, "-m", "torch_fl", "demo", "--graphs", "--model", "tiny", "--tokens", "8", "--rounds", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    assert "greedy tokens, flagos graph = native graph: yes" in p.stdout
    assert "graph = the same steps run eagerly (each side): yes" in p.stdout
    assert "the flagos graph captured" in p.stdout and "replays ran them without routing" in p.stdout


# ---------------------------------------------------------------- graph decoding's step, run eagerly (any backing)


@pytest.mark.anyplatform
def test_static_cache_decode_steps_give_generates_tokens():
    pytest.importorskip("transformers")
    from torch_fl.models import graph_decode, qwen3, workloads

    native = torch.device("cuda", 0) if ON_CUDA else torch.device("cpu")
    base = qwen3.build("tiny", seed=0)
    ids = qwen3.tokens(base.config.vocab_size, 2, 6, seed=1)
    model = copy.deepcopy(base).to("flagos")
    dec = graph_decode.GraphDecoder(model, 2, 20, "flagos", graphs=False)
    got = dec.decode(ids.to("flagos"), 12).cpu()
    if not ON_CUDA:  # exact float32 host kernels; a GPU's attention kernels differ with and without a mask
        assert torch.equal(got, workloads.greedy(model, ids.to("flagos"), 12).cpu())
    ref = graph_decode.GraphDecoder(base.to(native), 2, 20, native, graphs=False).decode(ids.to(native), 12)
    assert torch.equal(got, ref.cpu())
    assert torch.equal(dec.decode(ids.to("flagos"), 5).cpu(), got[:, :11])  # the decoder is reused per shape
    with pytest.raises(ValueError, match="up to 20 tokens"):
        dec.decode(ids.to("flagos"), 15)


@pytest.mark.anyplatform
@ON_HOST
def test_graph_decoding_on_host_names_the_cuda_requirement():
    pytest.importorskip("transformers")
    from torch_fl.models import graph_decode, qwen3

    model = qwen3.build("tiny", seed=0).to("flagos")
    dec = graph_decode.GraphDecoder(model, 1, 16, "flagos")
    with pytest.raises(RuntimeError, match="needs a CUDA backing"):
        dec.decode(qwen3.tokens(model.config.vocab_size, 1, 4).to("flagos"), 4)


# ---------------------------------------------------------------- CUDA backing: capture and replay per route kind


def _capture(fn, *args, **graph_kwargs):
    """(graph, static output) of fn(*args) captured after two warm-up calls on a side stream."""
    side = flagos.Stream()
    side.wait_stream(flagos.current_stream())
    with flagos.stream(side):
        for _ in range(2):
            fn(*args)
    flagos.current_stream().wait_stream(side)
    g = flagos.CUDAGraph()
    with flagos.graph(g, **graph_kwargs):
        out = fn(*args)
    return g, out


def _work(x, w):
    return torch.nn.functional.silu(x @ w + 1.0) * 2.0 - x.sum(-1, keepdim=True)


def _check_replays(backend_of_add: str | None):
    x = torch.randn(64, 64, device="flagos")
    w = torch.randn(64, 64, device="flagos")
    routing.reset_stats()
    g, out = _capture(_work, x, w)
    captured = g.captured_calls()
    stats_after_capture = routing.stats()
    for _ in range(3):
        torch_fl.as_native(x).copy_(torch.randn(64, 64, device="cuda"))  # a native call: no routed call counted
        g.replay()
        want = _work(torch_fl.as_native(x), torch_fl.as_native(w))
        torch.testing.assert_close(torch_fl.as_native(out), want, rtol=1e-4, atol=1e-4)
    assert g.replays == 3
    assert captured[("mm", "native")] == 1 and not any(b.startswith("fallback:") for _, b in captured)
    if backend_of_add is not None:
        assert {b for op, b in captured if op == "add.Tensor"} == {backend_of_add}, captured
    # replays go through no route: the counts are the capture's (the eager checks above run on native tensors)
    routing_rows = {(r.op, r.backend): r.calls for r in routing.stats()}
    assert routing_rows == {(r.op, r.backend): r.calls for r in stats_after_capture}


@pytest.mark.cuda
def test_native_routes_capture_and_replay():
    _check_replays(None)


def _routed_backend(backend: str) -> str:
    """The backend add.Tensor's calls are counted under when routed to `backend` (warm: recorded)."""
    routing.reset_stats()
    for _ in range(2):
        torch.randn(8, device="flagos") + 1.0
    ran = {r.backend for r in routing.stats() if r.op == "add.Tensor" and r.calls}
    assert len(ran) == 1 and "native" not in ran and not any(r.fallbacks for r in routing.stats()), ran
    return ran.pop()


@pytest.mark.flaggems_python
def test_flaggems_python_route_captures_and_replays():
    with routing.route({"add.Tensor": "flaggems_python"}):
        _check_replays(_routed_backend("flaggems_python"))


@pytest.mark.flaggems
def test_flaggems_replay_captures_and_replays():
    with routing.route({"add.Tensor": "flaggems"}):
        _check_replays(_routed_backend("flaggems"))


@pytest.mark.cuda
def test_sdpa_captures_and_replays():
    q, k, v = (torch.randn(1, 4, 16, 32, device="flagos", dtype=torch.bfloat16) for _ in range(3))
    g, out = _capture(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
    q.copy_(torch.randn_like(q))
    g.replay()
    want = torch.nn.functional.scaled_dot_product_attention(*map(torch_fl.as_native, (q, k, v)), is_causal=True)
    torch.testing.assert_close(torch_fl.as_native(out), want)


@pytest.mark.cuda
def test_capture_on_a_flagos_stream_and_shared_pools():
    x = torch.ones(1024, device="flagos")
    pool = flagos.graph_pool_handle()
    s = flagos.Stream()
    g1, y1 = _capture(lambda: x * 2, pool=pool, stream=s)
    g2, y2 = _capture(lambda: y1 + 1, pool=pool, stream=s)
    x.fill_(3.0)
    g1.replay()
    g2.replay()
    assert torch_fl.as_native(y2).eq(7.0).all()
    assert flagos.is_current_stream_capturing() is False


@pytest.mark.cuda
def test_cpu_fallback_raises_at_capture_naming_the_operator_and_route():
    x = torch.ones(16, device="flagos")
    with routing.route({"add.Tensor": "cpu_fallback"}):
        x + x  # eager: the fallback runs
        g = flagos.CUDAGraph()
        with pytest.raises(RuntimeError, match=r"aten::add\.Tensor runs on the cpu_fallback route \(routed there\)"):
            with flagos.graph(g):
                x + x
    # the capture ended cleanly: the device works on
    assert flagos.is_current_stream_capturing() is False
    assert torch_fl.as_native(x + x).eq(2.0).all()


@pytest.mark.cuda
def test_replays_do_not_grow_memory():
    x = torch.randn(256, 256, device="flagos")
    w = torch.randn(256, 256, device="flagos")
    g, out = _capture(_work, x, w)
    g.replay()
    flagos.synchronize()
    allocated, reserved = flagos.memory_allocated(), flagos.memory_reserved()
    for _ in range(500):
        g.replay()
    flagos.synchronize()
    assert (flagos.memory_allocated(), flagos.memory_reserved()) == (allocated, reserved)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_ACCELERATOR_GRAPH, reason="this torch has no torch.accelerator.Graph (2.11)")
def test_accelerator_graph_captures_flagos_work():
    x = torch.ones(64, device="flagos")
    y = torch.zeros(64, device="flagos")
    y.copy_(x * 3)  # warm-up
    s = torch.Stream()
    g = torch.accelerator.Graph()
    with s, g:
        y.copy_(x * 3)
    x.fill_(2.0)
    g.replay()
    torch.accelerator.synchronize()
    assert torch_fl.as_native(y).eq(6.0).all()
    assert isinstance(g.pool(), tuple)


# ---------------------------------------------------------------- CUDA backing: training


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))


@pytest.mark.cuda
def test_make_graphed_callables_forward_and_backward():
    eager = _mlp().to("flagos")
    graphed = copy.deepcopy(eager)
    sample = torch.randn(16, 32, device="flagos", requires_grad=True)
    graphed = flagos.make_graphed_callables(graphed, (sample,))
    for i in range(3):
        x = torch.randn(16, 32, device="flagos", requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        for m in (eager, graphed):
            m.zero_grad(set_to_none=True)
        eager(x).square().sum().backward()
        graphed(x2).square().sum().backward()
        torch.testing.assert_close(x.grad, x2.grad)
        for (name, p), q in zip(eager.named_parameters(), graphed.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, msg=f"{name}, step {i}")


@pytest.mark.cuda
def test_whole_training_step_captures_with_a_capturable_optimizer():
    eager, model = _mlp().to("flagos"), _mlp().to("flagos")
    opts = [torch.optim.Adam(m.parameters(), lr=1e-2, capturable=True) for m in (eager, model)]
    data = [(torch.randn(16, 32, device="flagos"), torch.randn(16, 8, device="flagos")) for _ in range(4)]
    static_x, static_y = torch.zeros(16, 32, device="flagos"), torch.zeros(16, 8, device="flagos")

    def step(m, opt, x, y):
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        return loss

    side = flagos.Stream()
    side.wait_stream(flagos.current_stream())
    with flagos.stream(side):  # warm-up (also what the eager twin runs first)
        for m, opt in zip((eager, model), opts, strict=True):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                step(m, opt, *data[0])
    flagos.current_stream().wait_stream(side)
    opts[1].zero_grad(set_to_none=True)
    g = flagos.CUDAGraph()
    with flagos.graph(g):
        static_loss = step(model, opts[1], static_x, static_y)
    for x, y in data:
        opts[0].zero_grad(set_to_none=True)
        want = step(eager, opts[0], x, y)
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        torch.testing.assert_close(static_loss, want, rtol=1e-4, atol=1e-5)
    for p, q in zip(eager.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- CUDA backing: graph decoding


@pytest.mark.cuda
def test_graph_decoding_matches_eager_and_native_and_does_not_grow():
    pytest.importorskip("transformers")
    from torch_fl.models import graph_decode, qwen3

    base = qwen3.build("tiny", seed=0, dtype=torch.bfloat16)
    ids = qwen3.tokens(base.config.vocab_size, 1, 8, seed=1)
    out = {}
    for dev in ("flagos", "cuda"):
        model = copy.deepcopy(base).to(dev)
        dec = graph_decode.GraphDecoder(model, 1, 40, dev)
        got = dec.decode(ids.to(dev), 24)
        eager = graph_decode.GraphDecoder(model, 1, 40, dev, graphs=False).decode(ids.to(dev), 24)
        assert torch.equal(got.cpu(), eager.cpu()), dev
        graph_decode.graph_api(dev).synchronize()
        allocated = graph_decode.graph_api(dev).memory_allocated()
        for _ in range(5):
            assert torch.equal(dec.decode(ids.to(dev), 24).cpu(), got.cpu())
        assert graph_decode.graph_api(dev).memory_allocated() == allocated and dec.captures == 1
        # the prefill is captured once per prompt length; another length gets a graph of its own
        assert len(dec.prefill_graphs) == 1
        short = ids[:, :5].to(dev)
        short_eager = graph_decode.GraphDecoder(model, 1, 40, dev, graphs=False).decode(short, 10)
        assert torch.equal(dec.decode(short, 10).cpu(), short_eager.cpu()), dev
        assert len(dec.prefill_graphs) == 2 and dec.captures == 1
        out[dev] = got.cpu()
        if dev == "flagos":
            captured = dec.graph.captured_calls()
            assert captured and {b for _, b in captured} == {"native"}, captured
            assert dec.graph.replays == 6 * 23 + 9
    assert torch.equal(out["flagos"], out["cuda"])
