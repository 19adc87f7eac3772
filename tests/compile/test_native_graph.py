"""Compiled flagos graphs run on the backing device inside while every operator takes its native route
(torch_fl/compile/native_graph.py), and on their routes once one does not, with no recompile.

Runs on both backings (host memory in CI).
"""

from __future__ import annotations

import pytest
import torch

import torch_fl
from tests.compile.generated_code import call_body, run_and_get_code
from torch_fl import routing

pytestmark = pytest.mark.anyplatform


def _calls() -> dict[str, int]:
    return {r.op: r.calls for r in routing.stats() if r.calls}


def _mlp(x, w1, w2):
    return torch.relu(x @ w1) @ w2


@pytest.fixture(scope="module")
def mlp():
    """A compiled two-matmul function on flagos, its generated code, and inputs."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    args = [torch.randn(*shape, device="flagos") for shape in ((8, 16), (16, 32), (32, 4))]
    compiled = torch.compile(_mlp, fullgraph=True)
    out, (code,) = run_and_get_code(compiled, *args)
    torch.testing.assert_close(out, _mlp(*args))
    yield {"fn": compiled, "args": args, "code": code}
    torch._dynamo.reset()


def test_a_graph_on_native_routes_runs_its_calls_natively(mlp):
    assert "graph_runs_natively = True" in mlp["code"]
    call = call_body(mlp["code"])
    assert "= graph_inputs(args, graph_runs_natively, graph_entry_aliases)" in call and "return graph_outputs(" in call
    routing.reset_stats()
    out = mlp["fn"](*mlp["args"])
    # The matmuls ran as the backing device's own calls: no flagos route counted them.
    assert not [op for op in _calls() if op.startswith(("mm", "addmm"))], _calls()
    assert out.device == mlp["args"][0].device and type(out) is torch.Tensor
    torch.testing.assert_close(out, _mlp(*mlp["args"]))
    # The output is an ordinary flagos tensor: eager operators take it, its memory is flagos memory.
    torch.testing.assert_close((out + 1).cpu(), out.cpu() + 1)
    assert torch.flagos.memory_allocated(0) >= out.numel() * out.element_size()


def test_a_route_away_from_native_puts_the_same_graph_back_on_its_routes(mlp):
    expected = _mlp(*mlp["args"])
    with routing.route({"neg": "cpu_fallback"}):  # any operator routed elsewhere
        routing.reset_stats()
        out = mlp["fn"](*mlp["args"])
        calls = _calls()
    assert sum(n for op, n in calls.items() if op.startswith("mm")) == 2, calls
    torch.testing.assert_close(out, expected)
    routing.reset_stats()
    mlp["fn"](*mlp["args"])  # the routes are native again: so are the calls
    assert not [op for op in _calls() if op.startswith("mm")]


def test_dispatch_logging_puts_the_graph_on_its_routes(mlp, capfd):
    with routing.dispatch_log():
        mlp["fn"](*mlp["args"])
    assert "[flagos dispatch] mm.out ->" in capfd.readouterr().err


def test_outputs_that_view_inputs_share_their_flagos_storage():
    torch._dynamo.reset()

    def fn(x, w):
        return x.t(), x[1:], x @ w

    x, w = torch.randn(4, 4, device="flagos"), torch.randn(4, 4, device="flagos")
    t, tail, y = torch.compile(fn, fullgraph=True)(x, w)
    for out in (t, tail, y):
        assert out.device == x.device
    assert t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    x.add_(1)  # a write to the input shows through its views, as in eager mode
    torch.testing.assert_close(t.cpu(), x.cpu().t())
    torch.testing.assert_close(tail.cpu(), x.cpu()[1:])
    torch._dynamo.reset()


def test_a_cpu_output_stays_on_the_cpu():
    torch._dynamo.reset()

    def fn(x, w):
        y = x @ w
        return y, y.sum().cpu()

    x, w = torch.randn(4, 4, device="flagos"), torch.randn(4, 4, device="flagos")
    y, total = torch.compile(fn, fullgraph=True)(x, w)
    assert y.device == x.device and total.device == torch.device("cpu")
    torch.testing.assert_close(total, (x.cpu() @ w.cpu()).sum())
    torch._dynamo.reset()


def test_a_kept_call_keeps_the_graph_on_its_routes():
    torch._dynamo.reset()

    def fn(x):
        return torch.nn.functional.silu(x) * 2

    x = torch.randn(4, 8, device="flagos")
    with torch_fl.compile.keeping_calls(["silu"]):
        out, (code,) = run_and_get_code(torch.compile(fn, fullgraph=True), x)
        routing.reset_stats()
        torch.compile(fn, fullgraph=True)(x)
        assert _calls().get("silu") == 1
    assert "graph_runs_natively = False" in code and "kept as a call" in code
    torch.testing.assert_close(out, fn(x))
    torch._dynamo.reset()


@pytest.mark.skipif(torch_fl.backing() == "cuda", reason="flagos widens histc's integer dtypes on host backing only")
def test_an_operator_flagos_widens_keeps_the_graph_on_its_routes():
    torch._dynamo.reset()

    def fn(x):
        return torch.histc(x, bins=4, min=0, max=3)

    x = torch.tensor([0, 1, 1, 2, 3], dtype=torch.int32, device="flagos")
    out, (code,) = run_and_get_code(torch.compile(fn, fullgraph=True), x)
    assert "graph_runs_natively = False" in code and "histc" in code
    torch.testing.assert_close(out.cpu(), torch.histc(x.cpu().double(), bins=4, min=0, max=3).to(out.dtype))
    torch._dynamo.reset()


def test_a_training_step_runs_natively_and_matches_eager():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2)).to("flagos")
    x = torch.randn(4, 8, device="flagos")
    eager = [p.detach().clone() for p in model.parameters()]
    model(x).square().sum().backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    model.zero_grad()
    compiled = torch.compile(model, fullgraph=True)
    routing.reset_stats()
    compiled(x).square().sum().backward()
    for p, g, e in zip(model.parameters(), grads, eager, strict=True):
        assert p.grad.device == p.device
        torch.testing.assert_close(p.grad, g)
        torch.testing.assert_close(p.detach(), e)
    assert not [op for op in _calls() if op.startswith(("mm", "addmm"))], _calls()
    torch._dynamo.reset()


def test_a_graph_buffers_count_as_flagos_memory():
    torch._dynamo.reset()

    def fn(x, w):
        return (x @ w).relu().sum()  # the matmul's result is a buffer of the graph, not an output

    x, w = torch.randn(256, 64, device="flagos"), torch.randn(64, 512, device="flagos")
    compiled = torch.compile(fn, fullgraph=True)
    compiled(x, w)
    torch.flagos.synchronize()
    torch.flagos.reset_peak_memory_stats()
    before = torch.flagos.memory_allocated()
    out = compiled(x, w)
    torch.flagos.synchronize()
    assert torch.flagos.max_memory_allocated() - before >= 256 * 512 * 4
    torch.testing.assert_close(out.cpu(), (x.cpu() @ w.cpu()).relu().sum(), rtol=1e-4, atol=1e-2)
    torch._dynamo.reset()


def test_random_graphs_draw_from_flagos_generator():
    torch._dynamo.reset()

    def fn(x):
        return torch.nn.functional.dropout(x, 0.5, training=True) * 2

    x = torch.randn(256, device="flagos")
    compiled = torch.compile(fn, fullgraph=True)
    drawn = []
    for cpu_seed in (1, 2):  # only flagos's generator may decide the mask
        torch.flagos.manual_seed(0)
        torch.random.default_generator.manual_seed(cpu_seed)
        drawn.append(compiled(x).cpu())
    assert torch.equal(drawn[0], drawn[1])
    assert 0.3 < (drawn[0] == 0).float().mean().item() < 0.7
    torch._dynamo.reset()


def test_a_graph_with_a_collective_stays_on_its_routes():
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    torch._dynamo.reset()
    dist.init_process_group("flagos", rank=0, world_size=1, store=dist.HashStore())
    try:

        def fn(x, w):
            return funcol.all_reduce(x @ w, "sum", dist.group.WORLD) * 2

        x, w = torch.randn(4, 4, device="flagos"), torch.randn(4, 4, device="flagos")
        out, (code,) = run_and_get_code(torch.compile(fn, fullgraph=True), x, w)
    finally:
        dist.destroy_process_group()
    # Over an alias the collective would look for a group of the backing device, which flagos's groups do not serve.
    assert "graph_runs_natively = False" in code and "process group" in code
    assert out.device == x.device
    torch.testing.assert_close(out.cpu(), (x.cpu() @ w.cpu()) * 2)
    torch._dynamo.reset()


def test_a_parameter_keeps_its_entry_alias_while_it_fits():
    import weakref

    from torch_fl._C import _graph_entry_aliases, _graph_inputs

    store = _graph_entry_aliases()
    weight = torch.nn.Parameter(torch.randn(4, 4, device="flagos"))
    x = torch.randn(4, 4, device="flagos")  # not a parameter: an owning alias of its own on each call
    try:
        w1, x1 = _graph_inputs([weight, x], True, store)
        assert w1.device.type != "flagos" and w1.data_ptr() == weight.data_ptr()
        first = weakref.ref(w1)  # alive while the store keeps it
        del w1
        w2, x2 = _graph_inputs([weight, x], True, store)
        assert first() is w2 and x1 is not x2
        del w2
        with torch.no_grad():
            weight.mul_(2)  # in place: the same bytes, the same alias
        (w3,) = _graph_inputs([weight], True, store)
        assert torch.equal(w3.cpu(), weight.detach().cpu())
        # w3 still held from the last call: the next call gets an alias of its own
        (w4,) = _graph_inputs([weight], True, store)
        assert w4 is not w3 and w4.data_ptr() == weight.data_ptr()
        del w3, w4
        weight.data = torch.randn(2, 8, device="flagos")  # other bytes and geometry: a new alias
        (w5,) = _graph_inputs([weight], True, store)
        assert w5.shape == (2, 8) and torch.equal(w5.cpu(), weight.detach().cpu())
    finally:
        _graph_inputs([], False)


def test_a_kept_entry_alias_holds_no_memory():
    import gc

    from torch_fl._C import _graph_entry_aliases, _graph_inputs

    store = _graph_entry_aliases()
    gc.collect()
    before = torch.flagos.memory_allocated()
    weight = torch.nn.Parameter(torch.randn(1 << 16, device="flagos"))
    try:
        (alias,) = _graph_inputs([weight], True, store)
        del alias, weight
        gc.collect()
        # The store still has the alias, yet the parameter's memory is freed, as it is on CUDA.
        assert torch.flagos.memory_allocated() == before
        other = torch.nn.Parameter(torch.randn(1 << 16, device="flagos"))  # may take the freed memory's place
        (alias,) = _graph_inputs([other], True, store)
        assert torch.equal(alias.cpu(), other.detach().cpu())
    finally:
        _graph_inputs([], False)


def test_a_compiled_module_follows_its_parameters_between_calls():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to("flagos")
    compiled = torch.compile(model, fullgraph=True)
    x = torch.randn(3, 8, device="flagos")
    for change in (None, "in place", "data"):
        if change == "in place":
            with torch.no_grad():
                model[0].weight.mul_(-1)
        elif change == "data":
            model[2].weight.data = torch.randn(4, 16, device="flagos")
        with torch.no_grad():
            out = compiled(x)
            torch.testing.assert_close(out.cpu(), model(x).cpu())
    torch._dynamo.reset()
