"""The FlagGems backend against a fake flag_gems with FlagGems' registration-table shape.

flag_gems cannot be imported without a GPU, so CI exercises the table
building, argument unwrapping, result wrapping, fallback and logging logic
with a monkeypatched module; the real one runs under the `flaggems` marker. How PyRoute hands a Python
kernel its arguments and takes back its results, apart from that policy: test_flaggems_kernel_calls.py.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import torch_fl
from tests.unit.routing_fixtures import make_fake_flag_gems
from torch_fl import routing
from torch_fl.backends import flaggems
from torch_fl.routing import planner, registry, state
from torch_fl.vocab.errors import FallbackWarning, RoutingError

pytestmark = pytest.mark.anyplatform


def row(op, backend):
    return next((s for s in routing.stats() if s.op == op and s.backend == backend), None)


def test_table_comes_from_flaggems_own_registration():
    table = flaggems.build_table(make_fake_flag_gems())
    # the entry whose condition is off is not registered, exactly as flag_gems.enable() would do
    assert sorted(table) == ["abs.out", "add.Tensor", "add_.Tensor", "cat", "mul_.Tensor", "neg"]


def test_table_from_full_config_when_enable_does_not_use_lib():
    mod = make_fake_flag_gems()
    mod.enable = lambda **kw: None
    assert "sub.Tensor" not in flaggems.build_table(mod) and "add.Tensor" in flaggems.build_table(mod)


def test_unavailable_on_host_with_the_reason(routing_state):
    if torch_fl.backing() != "cpu":
        pytest.skip("host backing only")
    flaggems.LOADER.reset()
    from torch_fl import backends

    b = backends.get("flaggems")
    assert not b.available() and "host memory" in b.unavailable_reason()
    assert b.info()["available"] is False


def test_flaggems_source_dir_must_hold_flaggems(monkeypatch, tmp_path):
    monkeypatch.setenv("FLAGGEMS_SOURCE_DIR", str(tmp_path))
    with pytest.raises(RoutingError, match="holds no FlagGems source"):
        flaggems.source_dir()
    (tmp_path / "src" / "flag_gems").mkdir(parents=True)
    (tmp_path / "src" / "flag_gems" / "__init__.py").write_text("")
    assert flaggems.source_dir() == str(tmp_path / "src")
    # flag_gems itself sets the variable to its package folder on import
    monkeypatch.setenv("FLAGGEMS_SOURCE_DIR", str(tmp_path / "src" / "flag_gems"))
    assert flaggems.source_dir() == str(tmp_path / "src")


def test_routed_call_runs_on_native_aliases_and_returns_flagos_on_the_same_device(fake_gems):
    routing.reset_stats()
    routing.set_route("add.Tensor", "flaggems")
    idx = torch.flagos.device_count() - 1
    x = torch.arange(3.0, device=f"flagos:{idx}")
    y = x + x
    assert fake_gems.calls[-1] == ("add", torch_fl.backing(), torch.float32)
    assert y.device == torch.device("flagos", idx)
    assert torch.equal(y.cpu(), torch.arange(3.0) * 2)
    assert row("add.Tensor", "flaggems") == routing.OpStat("add.Tensor", "flaggems", 1, 0, 0)


def test_tensor_list_arguments(fake_gems):
    routing.set_route("cat", "flagos_python")
    x = torch.ones(2, device="flagos")
    z = torch.cat([x, x + 1])
    assert fake_gems.calls[-1][0] == "cat" and z.device.type == "flagos"
    assert torch.equal(z.cpu(), torch.tensor([1.0, 1.0, 2.0, 2.0]))
    assert row("cat", "flaggems_python").calls == 1  # stats use the canonical name of the alias


def test_in_place_returns_the_flagos_argument_itself(fake_gems):
    routing.set_route("mul_.Tensor", "flaggems")
    x = torch.full((3,), 2.0, device="flagos")
    r = x.mul_(x)
    assert r is x and torch.equal(x.cpu(), torch.full((3,), 4.0))


def test_out_variant_resizes_the_flagos_output(fake_gems):
    routing.set_route("abs.out", "flaggems")
    x = -torch.arange(4.0, device="flagos")
    out = torch.empty(0, device="flagos")
    r = torch.abs(x, out=out)
    assert r is out and out.shape == (4,) and torch.equal(out.cpu(), torch.arange(4.0))


def test_python_exception_falls_back_for_that_dtype_once_logged(fake_gems):
    routing.reset_stats()
    routing.set_route("add.Tensor", "flaggems")
    x = torch.ones(2, device="flagos", dtype=torch.float64)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert torch.equal((x + x).cpu(), torch.full((2,), 2.0, dtype=torch.float64))
        assert torch.equal((x + x).cpu(), torch.full((2,), 2.0, dtype=torch.float64))
    msgs = [str(m.message) for m in w if issubclass(m.category, FallbackWarning)]
    assert len(msgs) == 1 and "ValueError" in msgs[0] and "float64" in msgs[0]
    assert sum(c[0] == "add" for c in fake_gems.calls) == 1  # the second call went straight to native
    assert row("add.Tensor", "flaggems") == routing.OpStat("add.Tensor", "flaggems", 1, 2, 1)
    # float32 still runs on FlagGems
    y = torch.ones(2, device="flagos")
    y + y
    assert fake_gems.calls[-1] == ("add", torch_fl.backing(), torch.float32)
    assert "float64" in str(routing.explain("add.Tensor", torch.float64).reason)
    assert routing.explain("add.Tensor", torch.float32).reason is None


def test_every_plan_runs_in_the_operators_one_cpp_kernel(fake_gems):
    routing.set_route("add.Tensor", "flaggems")
    handle = registry.REGISTERED["add.Tensor"].handle
    assert isinstance(handle, torch_fl._C.PyRoute) and handle.registered and not handle.native
    x = torch.ones(2, device="flagos", dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x + x  # fails on the fake, re-plans float64 to native from inside the call
    with routing.route({"add.Tensor[float32]": "cpu_fallback"}):  # a per-dtype mix: the same kernel, new state
        assert isinstance(registry.REGISTERED["add.Tensor"].handle, torch_fl._C.PyRoute)
        y = torch.ones(2, device="flagos")
        assert torch.equal((y + y).cpu(), torch.full((2,), 2.0))
    routing.set_route("add.Tensor", "native")
    assert "add.Tensor" not in registry.REGISTERED
    # The kernel stays registered (another thread may be running it) and hands every call to the native route.
    assert torch_fl._C.PyRoute("add.Tensor").native and torch_fl._C.PyRoute("add.Tensor").registered
    calls = len(fake_gems.calls)
    assert torch.equal((y + y).cpu(), torch.full((2,), 2.0)) and len(fake_gems.calls) == calls


def test_in_place_failure_is_not_rerun(fake_gems):
    routing.set_route("add_.Tensor", "flaggems")
    x = torch.ones(3, device="flagos")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="not re-run natively"):
            x.add_(x)
    # the fake wrote -1 before failing; a re-run would have produced -2
    assert torch.equal(x.cpu(), -torch.ones(3))
    x.fill_(1.0)
    x.add_(x)  # later float32 calls run natively
    assert torch.equal(x.cpu(), torch.full((3,), 2.0))


def test_device_fault_is_raised_not_hidden(fake_gems):
    routing.set_route("neg", "flaggems")
    with pytest.raises(RuntimeError, match="illegal memory access"):
        torch.ones(2, device="flagos").neg()
    assert "neg" not in state.STATE.failed


def test_strict_kernel_failure_is_an_error(fake_gems):
    planner.set_flags(strict=True)
    routing.set_route("add.Tensor", "flaggems")
    x = torch.ones(2, device="flagos", dtype=torch.float64)
    with pytest.raises(RuntimeError, match="FLAGOS_STRICT=1"):
        x + x


def _gems_calls(fake_gems, name):
    return sum(c[0] == name for c in fake_gems.calls)


@pytest.mark.parametrize("rule", ["add.Tensor", "add.Tensor[float32]"], ids=["every-dtype", "one-dtype"])
def test_an_empty_input_runs_natively_counted_and_warned_once(fake_gems, rule):
    # FlagGems 5.0.2's Hopper mm faults the GPU on an empty input: FlagGems is never given one.
    routing.reset_stats()
    routing.set_route(rule, "flaggems")
    empty = torch.ones(0, 3, device="flagos")
    with pytest.warns(FallbackWarning, match="empty input") as w:
        y = empty + empty
        empty + torch.ones(3, device="flagos")  # broadcast against an empty tensor: still empty input
    assert len([m for m in w if issubclass(m.category, FallbackWarning)]) == 1
    assert y.device.type == "flagos" and y.shape == (0, 3)
    assert _gems_calls(fake_gems, "add") == 0
    x = torch.ones(2, 3, device="flagos")
    assert torch.equal((x + x).cpu(), torch.full((2, 3), 2.0))
    assert _gems_calls(fake_gems, "add") == 1  # non-empty calls still run on FlagGems
    assert row("add.Tensor", "flaggems") == routing.OpStat("add.Tensor", "flaggems", 1, 2, 0)


def test_an_empty_tensor_in_a_list_runs_natively(fake_gems):
    routing.set_route("cat", "flaggems")
    x = torch.ones(2, device="flagos")
    with pytest.warns(FallbackWarning, match="empty input"):
        z = torch.cat([torch.ones(0, device="flagos"), x])
    assert torch.equal(z.cpu(), torch.ones(2)) and _gems_calls(fake_gems, "cat") == 0
    torch.cat([x, x])
    assert _gems_calls(fake_gems, "cat") == 1


def test_an_empty_out_tensor_is_not_an_empty_input(fake_gems):
    routing.set_route("abs.out", "flaggems")
    out = torch.empty(0, device="flagos")  # the kernel resizes it: the call still goes to FlagGems
    torch.abs(-torch.ones(2, device="flagos"), out=out)
    assert _gems_calls(fake_gems, "abs.out") == 1 and torch.equal(out.cpu(), torch.ones(2))


def test_explain_says_empty_inputs_run_natively(fake_gems):
    routing.set_route("add.Tensor", "flaggems")
    assert any("empty input" in n for n in routing.explain("add.Tensor").backend_notes)
    routing.set_route("add.Tensor", "native")
    assert not any("empty input" in n for n in routing.explain("add.Tensor").backend_notes)


def test_strict_empty_input_is_an_error(fake_gems):
    planner.set_flags(strict=True)
    routing.set_route("add.Tensor", "flaggems")
    x = torch.ones(0, device="flagos")
    with pytest.raises(RuntimeError, match="input tensor is empty.*FLAGOS_STRICT=1"):
        x + x


def test_op_missing_from_flaggems_falls_back(fake_gems):
    routing.set_route("sub.Tensor", "flaggems")  # its condition is off in the fake
    x = torch.ones(2, device="flagos")
    with pytest.warns(FallbackWarning, match="flaggems has no kernel for sub.Tensor"):
        x - x
    assert row("sub.Tensor", "flaggems").fallbacks == 1


def test_unsupported_dtype_falls_back(fake_gems):
    routing.set_route("add.Tensor", "flaggems")
    x = torch.ones(2, device="flagos", dtype=torch.complex64)
    with pytest.warns(FallbackWarning, match="does not support"):
        x + x
    assert not any(c[0] == "add" for c in fake_gems.calls)


def test_glob_rule_applies_to_ops_the_backend_has(fake_gems, tmp_path):
    p = tmp_path / "g.conf"
    p.write_text("a*.Tensor = flaggems\n")
    routing.load_config(str(p))
    routed = {e.op for e in routing.table() if e.backend == "flaggems"}
    assert routed == {"add.Tensor", "add_.Tensor"}


def test_dispatch_log_for_flaggems(fake_gems, capfd):
    planner.set_flags(log_dispatch=True)
    routing.set_route("add.Tensor", "flagos_python")
    x = torch.ones(2, device="flagos")
    x + x
    assert "[flagos dispatch] add.Tensor -> flagos_python\n" in capfd.readouterr().err


def test_dispatch_log_switches_on_and_off_after_the_route_exists(fake_gems, capfd):
    # The C++ switch alone (what the in-process dispatch tests flip around one
    # call, no re-planning) must reach a FlagGems kernel registered before it.
    routing.set_route("add.Tensor", "flaggems")
    x = torch.ones(2, device="flagos")
    x + x
    capfd.readouterr()
    torch_fl._C._set_log_dispatch(True)
    try:
        x + x
    finally:
        torch_fl._C._set_log_dispatch(False)
    assert "[flagos dispatch] add.Tensor -> flaggems\n" in capfd.readouterr().err
    x + x
    assert "[flagos dispatch]" not in capfd.readouterr().err


def test_a_failing_kernel_with_a_scalar_operand_falls_back_natively(fake_gems):
    """The fallback runs the native route on what the kernel was given: the
    Python number goes back in as the wrapped-number tensor it came as (an
    H200 demo under the FlagGems profile stopped at `position_ids - 1` when
    FlagGems' int64 sub failed)."""
    routing.set_route("add.Tensor", "flaggems")
    x = torch.ones(2, device="flagos", dtype=torch.float64)  # the fake add raises for float64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        assert torch.equal((x + 1).cpu(), torch.full((2,), 2.0, dtype=torch.float64))
        assert torch.equal((x + 1.5).cpu(), torch.full((2,), 2.5, dtype=torch.float64))
    assert fake_gems.calls[-1] == ("add", torch_fl.backing(), torch.float64)


@pytest.mark.parametrize("op,call", [("add.Tensor", lambda x: x + x), ("cat", lambda x: torch.cat([x, x]))])
def test_the_profiler_trace_names_the_backend_of_a_routed_call(fake_gems, op, call):
    # add.Tensor runs through its typed front, cat through the boxed kernel
    routing.set_route(op, "flagos_python")
    x = torch.ones(2, device="flagos")
    with torch.autograd.profiler.profile() as prof:
        call(x)
    assert f"flagos::{op} -> flagos_python" in {e.name for e in prof.function_events}
