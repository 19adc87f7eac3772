"""Runtime routing on flagos tensors (host backing in CI): set_route, route(), explain, stats, fallback rules."""

from __future__ import annotations

import warnings

import pytest
import torch

import torch_fl
from torch_fl import routing
from torch_fl.routing import planner, registry, state
from torch_fl.vocab.errors import FallbackWarning, RoutingError

pytestmark = pytest.mark.anyplatform


def row(op, backend):
    return next((s for s in routing.stats() if s.op == op and s.backend == backend), None)


def test_set_route_takes_effect_on_the_next_call_and_native_removes_the_kernel(routing_state):
    x = torch.arange(4.0, device="flagos")
    routing.reset_stats()
    routing.set_route("add.Tensor", "cpu_fallback")
    assert "add.Tensor" in registry.REGISTERED
    assert torch.equal((x + x).cpu(), torch.arange(4.0) * 2)
    assert row("add.Tensor", "cpu_fallback").calls == 1
    routing.set_route("add.Tensor", "native")
    assert "add.Tensor" not in registry.REGISTERED
    y = x + x
    assert y.device.type == "flagos" and row("add.Tensor", "native").calls == 1
    assert row("add.Tensor", "cpu_fallback").calls == 1


def test_route_context_manager_restores_previous_routes(routing_state):
    routing.set_route("mul.Tensor", "cpu_fallback")
    with routing.route({"mul.Tensor": "native", "neg": "cpu_fallback"}):
        assert {e.op: e.backend for e in routing.table()}["mul.Tensor"] == "native"
        assert "neg" in registry.REGISTERED
    entries = {e.op: e for e in routing.table()}
    assert entries["mul.Tensor"].backend == "cpu_fallback" and entries["mul.Tensor"].source == "runtime"
    assert "neg" not in entries and "neg" not in registry.REGISTERED


def _runtime_routes() -> dict[str, str]:
    return {e.op: e.backend for e in routing.table() if e.source == "runtime"}


def test_route_blocks_exited_in_any_order_restore_exactly_what_each_changed(routing_state):
    routing.set_route("mul.Tensor", "cpu_fallback")  # there before any block
    a = routing.route({"add.Tensor": "cpu_fallback", "mul.Tensor": "native"})
    b = routing.route({"add.Tensor": "native"})
    c = routing.route({"add.Tensor": "cpu_fallback", "mul.Tensor": "cpu_fallback"})
    a.__enter__()
    b.__enter__()
    c.__enter__()
    assert _runtime_routes() == {"add.Tensor": "cpu_fallback", "mul.Tensor": "cpu_fallback"}
    b.__exit__(None, None, None)  # c still holds both: nothing visible changes
    assert _runtime_routes() == {"add.Tensor": "cpu_fallback", "mul.Tensor": "cpu_fallback"}
    a.__exit__(None, None, None)
    assert _runtime_routes() == {"add.Tensor": "cpu_fallback", "mul.Tensor": "cpu_fallback"}
    c.__exit__(None, None, None)  # the last one out restores what was there before a entered
    assert _runtime_routes() == {"mul.Tensor": "cpu_fallback"}
    assert "add.Tensor" not in registry.REGISTERED and not state.STATE.route_blocks


def test_nested_route_blocks_of_one_thread_restore_each_level(routing_state):
    with routing.route({"add.Tensor": "cpu_fallback"}):
        with routing.route({"add.Tensor": "native", "neg": "cpu_fallback"}):
            assert _runtime_routes() == {"add.Tensor": "native", "neg": "cpu_fallback"}
        assert _runtime_routes() == {"add.Tensor": "cpu_fallback"}
        x = torch.arange(3.0, device="flagos")
        routing.reset_stats()
        assert torch.equal((x + x).cpu(), torch.arange(3.0) * 2) and row("add.Tensor", "cpu_fallback").calls == 1
    assert _runtime_routes() == {} and "add.Tensor" not in registry.REGISTERED


def test_route_restores_even_when_the_body_raises(routing_state):
    with pytest.raises(ZeroDivisionError), routing.route({"neg": "cpu_fallback"}):
        1 / 0  # noqa: B018
    assert "neg" not in registry.REGISTERED


def test_set_route_to_none_or_another_non_string_raises_naming_clear_route(routing_state):
    routing.set_route("add.Tensor", "cpu_fallback")
    for bad in (None, 3, ["native"]):
        with pytest.raises(RoutingError, match=r"backend names are strings .*clear_route\(op\)"):
            routing.set_route("add.Tensor", bad)
    entry = {e.op: e for e in routing.table()}["add.Tensor"]
    assert (entry.backend, entry.source) == ("cpu_fallback", "runtime")  # untouched
    routing.clear_route("add.Tensor")  # the way to drop it
    assert {e.op: e for e in routing.table()}.get("add.Tensor", entry).source != "runtime"


def test_bad_names_raise_with_suggestions(routing_state):
    with pytest.raises(RoutingError, match="Did you mean add.Tensor"):
        routing.set_route("ad.Tensor", "native")
    with pytest.raises(RoutingError, match="Valid backends: native"):
        routing.set_route("add.Tensor", "flagems")
    with pytest.raises(RoutingError, match="cannot be routed"):
        routing.set_route("empty.memory_format", "cpu_fallback")
    # one operator, at most one dtype: what only a routing file can say is named as such
    for key in ("mm[numel>=10]", "mm[bfloat16, numel>=10]", "mm[bfloat16, float16]"):
        with pytest.raises(RoutingError, match=r"at most one dtype.*written in a routing file"):
            routing.set_route(key, "cpu_fallback")
    with pytest.raises(RoutingError, match="name one operator, not a glob"):
        routing.set_route("add*", "cpu_fallback")


def test_dtype_route_dispatches_per_call(routing_state):
    routing.reset_stats()
    routing.set_route("neg[float64]", "cpu_fallback")
    torch.ones(2, device="flagos", dtype=torch.float64).neg()
    torch.ones(2, device="flagos").neg()
    assert row("neg", "cpu_fallback").calls == 1
    assert row("neg", "native").calls == 1


def test_unavailable_backend_falls_back_with_one_warning_per_op_backend_dtype(routing_state):
    routing.reset_stats()
    routing.set_route("neg", "ascend")
    x = torch.ones(3, device="flagos")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            assert torch.equal(x.neg().cpu(), -torch.ones(3))
        x.double().neg()
    msgs = [str(m.message) for m in w if issubclass(m.category, FallbackWarning)]
    assert len(msgs) == 2 and "float32" in msgs[0] and "float64" in msgs[1]
    assert "ascend" in msgs[0] and "unavailable" in msgs[0]
    assert row("neg", "ascend") == routing.OpStat("neg", "ascend", 0, 4, 0)
    assert row("neg", "native").calls == 4


def test_strict_refuses_a_route_that_can_only_fall_back(routing_state):
    planner.set_flags(strict=True)
    with pytest.raises(routing.RoutingError, match="FLAGOS_STRICT=1 forbids falling back"):
        routing.set_route("neg", "ascend")
    assert ("neg", None) not in state.STATE.runtime_rules
    planner.set_flags(strict=False)
    routing.set_route("neg", "ascend")
    with pytest.raises(routing.RoutingError, match="ascend"):
        planner.set_flags(strict=True)  # the table in force would fall back
    assert not state.STATE.strict


def test_cuda_on_host_backing_is_unavailable(routing_state):
    if torch_fl.backing() != "cpu":
        pytest.skip("host backing only")
    routing.set_route("neg", "cuda")
    (entry,) = [e for e in routing.table() if e.op == "neg"]
    assert entry.runs_on == "native (cpu)" and "write 'cpu' or 'native'" in entry.reason


def test_explain_lists_candidates_in_precedence_order(routing_state):
    routing.set_route("add.Tensor", "cpu_fallback")
    ex = routing.explain("add.Tensor")
    statuses = [(c.rule.source, c.status) for c in ex.candidates]
    assert statuses[0] == ("runtime", "taken")
    assert statuses[1][0].startswith("default file backends_") and statuses[1][1] == "shadowed"
    text = str(ex)
    assert "aten::add.Tensor" in text and "routed to: cpu_fallback" in text and "shadowed" in text


def test_explain_unrouted_op_and_fallback_reason(routing_state):
    ex = routing.explain("atan2")
    assert ex.candidates == [] and ex.default_taken and ex.runs_on == torch_fl.backing()
    routing.set_route("atan2", "ascend")
    ex = routing.explain("atan2", dtype="bf16")
    assert ex.runs_on.startswith("native") and "unavailable" in ex.reason and "ascend" in str(ex)


def test_dispatch_log_names_the_backend_that_ran(routing_state, capfd):
    planner.set_flags(log_dispatch=True)
    routing.set_route("neg", "cpu_fallback")
    routing.set_route("mul.Tensor", "native")
    x = torch.ones(2, device="flagos")
    x.neg()
    x * x
    err = capfd.readouterr().err
    assert "[flagos dispatch] neg -> cpu_fallback\n" in err
    assert f"[flagos dispatch] mul.Tensor -> {torch_fl.backing()}\n" in err


def test_dispatch_log_block_reaches_routed_kernels_and_restores(routing_state, capfd):
    # A route to an unavailable backend runs natively after its notice: the log names the native route.
    routing.set_route("neg", "ascend")
    x = torch.ones(2, device="flagos")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", routing.FallbackWarning)
        with routing.dispatch_log():
            x.neg()
            x.abs()
        x.neg()
    err = capfd.readouterr().err
    assert err.count(f"[flagos dispatch] neg -> {torch_fl.backing()}\n") == 1
    assert f"[flagos dispatch] abs -> {torch_fl.backing()}\n" in err
    assert not state.STATE.log_dispatch


def test_logging_off_prints_nothing(routing_state, capfd):
    planner.set_flags(log_dispatch=False)
    routing.set_route("neg", "cpu_fallback")
    torch.ones(2, device="flagos").neg()
    assert "[flagos dispatch]" not in capfd.readouterr().err


def test_reset_stats_zeroes_python_and_native_counts(routing_state):
    routing.set_route("neg", "ascend")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.ones(2, device="flagos").neg()
    assert routing.stats()
    routing.reset_stats()
    assert routing.stats() == []


def _rms_norm_grads():
    torch.manual_seed(0)
    x = torch.randn(3, 4, device="flagos", requires_grad=True)
    w = torch.randn(4, device="flagos", requires_grad=True)
    y = torch.rms_norm(x, [4], w)
    return y, torch.autograd.grad(y.sum(), [x, w])


def test_routed_op_that_pytorch_differentiates_by_decomposing_keeps_its_gradients(routing_state):
    # rms_norm has no derivative of its own; a kernel of ours at PrivateUse1
    # took its decomposition away from autograd and gradients silently stopped.
    y_ref, g_ref = _rms_norm_grads()
    routing.reset_stats()
    routing.set_route("rms_norm", "cpu_fallback")
    assert "calls that need a gradient run that decomposition" in str(routing.explain("rms_norm"))
    with pytest.warns(FallbackWarning, match="rms_norm .float32. routed to 'cpu_fallback' ran as PyTorch's decomp"):
        y, g = _rms_norm_grads()
    assert y.grad_fn is not None
    for a, b in zip(g, g_ref, strict=True):
        assert torch.equal(a.cpu(), b.cpu())
    assert row("rms_norm", "cpu_fallback") == routing.OpStat("rms_norm", "cpu_fallback", 0, 1, 0)
    with torch.no_grad():  # no gradient needed: the routed kernel runs
        out = torch.rms_norm(torch.ones(2, 4, device="flagos"), [4])
    assert torch.allclose(out.cpu(), torch.ones(2, 4))
    assert row("rms_norm", "cpu_fallback").calls == 1
    routing.set_route("rms_norm", "native")  # native again: PyTorch's own behaviour
    _, g = _rms_norm_grads()
    assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(g, g_ref, strict=True))


def test_strict_refuses_the_decomposition_of_a_routed_op_that_needs_a_gradient(routing_state):
    planner.set_flags(strict=True)
    routing.set_route("rms_norm", "cpu_fallback")
    with pytest.raises(RuntimeError, match="has no backward for it, and FLAGOS_STRICT=1"):
        _rms_norm_grads()


def test_decomposition_of_a_dtype_routed_natively_is_no_fallback(routing_state):
    # rms_norm[float64] routed away, float32 native: a float32 gradient call is plain PyTorch.
    routing.reset_stats()
    routing.set_route("rms_norm[float64]", "cpu_fallback")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        _, g = _rms_norm_grads()
    assert all(t is not None for t in g)
    assert row("rms_norm", "cpu_fallback") is None
