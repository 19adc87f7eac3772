"""Which failures demote a route: only a backend's own defects.

A routed kernel that raises is re-run (or, for in-place/out= operators,
checked) natively: when the native route rejects the call too, it was the
caller's mistake, whose native error propagates unchanged and leaves the
route alone. Interrupts and signal handlers' exceptions pass through. What
`table()`, `explain()` and the dispatch log say follows what runs.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import torch_fl
from torch_fl import routing
from torch_fl.routing import state

pytestmark = pytest.mark.anyplatform


def row(op, backend):
    return next((s for s in routing.stats() if s.op == op and s.backend == backend), None)


def native_error(fn) -> tuple[type, str]:
    with pytest.raises(Exception) as info:
        fn()
    return info.type, str(info.value)


def test_a_callers_shape_error_is_the_native_error_and_keeps_the_route(fake_gems):
    routing.reset_stats()
    routing.set_route("add.Tensor", "flaggems")
    a, b = torch.ones(2, device="flagos"), torch.ones(3, device="flagos")
    expected = native_error(lambda: torch.ones(2) + torch.ones(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no FallbackWarning either
        assert native_error(lambda: a + b) == expected
    assert fake_gems.calls[-1][0] == "add"  # FlagGems saw it first
    assert "add.Tensor" not in state.STATE.failed
    assert row("add.Tensor", "flaggems") == routing.OpStat("add.Tensor", "flaggems", 1, 0, 0)
    a + a
    assert fake_gems.calls[-1] == ("add", torch_fl.backing(), torch.float32)  # still routed


def test_a_callers_error_on_an_in_place_op_is_checked_not_run_twice(fake_gems):
    routing.set_route("add_.Tensor", "flaggems")  # the fake's add_ writes -1, then raises
    x, y = torch.ones(3, device="flagos"), torch.ones(4, device="flagos")
    expected = native_error(lambda: torch.ones(3).add_(torch.ones(4)))
    assert native_error(lambda: x.add_(y)) == expected
    assert "add_.Tensor" not in state.STATE.failed


def test_a_backend_defect_demotes_that_dtype_and_table_says_so(fake_gems):
    routing.set_route("add.Tensor", "flaggems")
    x = torch.ones(2, device="flagos", dtype=torch.float64)  # the fake has no float64 add
    with pytest.warns(routing.FallbackWarning, match="ValueError"):
        assert torch.equal((x + x).cpu(), torch.full((2,), 2.0, dtype=torch.float64))
    rows = {(e.op, e.dtype): e for e in routing.table() if e.op == "add.Tensor"}
    assert rows[("add.Tensor", None)].runs_on == "flaggems"
    demoted = rows[("add.Tensor", "float64")]
    assert demoted.runs_on.startswith("native") and "raised" in demoted.reason


class Interrupt(BaseException):
    pass


@pytest.mark.parametrize("exc", [KeyboardInterrupt, Interrupt], ids=["KeyboardInterrupt", "BaseException"])
def test_base_exceptions_pass_through_and_demote_nothing(fake_gems, exc):
    def add(a, b, *, alpha=1):
        raise exc()

    fake_gems._FULL_CONFIG = (("add.Tensor", add),)
    from torch_fl.backends import flaggems

    flaggems.LOADER.use_module(fake_gems)
    routing.reset_stats()
    routing.set_route("add.Tensor", "flaggems")
    x = torch.ones(2, device="flagos")
    with pytest.raises(exc):
        x + x
    assert "add.Tensor" not in state.STATE.failed and row("add.Tensor", "flaggems").failures == 0


def test_a_signal_handlers_exception_passes_through_and_demotes_nothing(fake_gems):
    def on_alarm(signum, frame):
        raise TimeoutError("the caller's own timeout")

    def add(a, b, *, alpha=1):
        signal.raise_signal(signal.SIGALRM)  # delivered while the kernel runs, as a timer's would be
        return torch.add(a, b, alpha=alpha)

    fake_gems._FULL_CONFIG = (("add.Tensor", add),)
    from torch_fl.backends import flaggems

    flaggems.LOADER.use_module(fake_gems)
    routing.reset_stats()
    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        routing.set_route("add.Tensor", "flaggems")
        x = torch.ones(2, device="flagos")
        with pytest.raises(TimeoutError, match="the caller's own timeout"):
            x + x
    finally:
        signal.signal(signal.SIGALRM, old)
    assert "add.Tensor" not in state.STATE.failed and row("add.Tensor", "flaggems").failures == 0


def test_the_dispatch_log_names_the_backend_that_ran(fake_gems, capfd):
    x = torch.ones(2, device="flagos")
    xd = x.double()
    routing.set_route("add.Tensor", "flaggems_python")
    routing.set_log_dispatch(True)
    capfd.readouterr()
    x + x
    assert capfd.readouterr().err.splitlines() == ["[flagos dispatch] add.Tensor -> flagos_python"]
    routing.set_route("sub.Tensor", "flaggems")  # FlagGems lacks it: runs natively, and the log says so
    with pytest.warns(routing.FallbackWarning):
        x - x
    assert capfd.readouterr().err.splitlines() == [f"[flagos dispatch] sub.Tensor -> {torch_fl.backing()}"]
    with pytest.warns(routing.FallbackWarning):
        xd + xd  # the fake raises for float64: FlagGems ran, then the native route
    assert capfd.readouterr().err.splitlines() == [
        "[flagos dispatch] add.Tensor -> flagos_python",
        f"[flagos dispatch] add.Tensor -> {torch_fl.backing()}",
    ]


def test_the_reference_implementations_helpers(fake_gems):
    assert not torch_fl.is_flaggems_enabled() and torch_fl.get_registered_ops() == []
    routing.set_route("add.Tensor", "flaggems")
    routing.set_route("sub.Tensor", "flaggems")  # falls back: FlagGems does not run it
    with routing.route({"mul_.Tensor": "flagos_python"}):
        assert torch_fl.get_registered_ops() == ["add.Tensor", "mul_.Tensor"] and torch_fl.is_flaggems_enabled()
    assert torch_fl.get_registered_ops() == ["add.Tensor"]
    assert torch_fl.is_flaggems_available()


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )


@pytest.mark.skipif(torch_fl.backing() != "cpu", reason="FlagGems must be unavailable (host backing)")
def test_strict_with_a_route_that_can_only_fall_back_fails_at_import():
    r = run_python("import torch_fl", FLAGOS_STRICT="1", FLAGOS_OP_add__Tensor="flaggems")
    assert r.returncode != 0
    assert "RoutingError" in r.stderr and "FLAGOS_STRICT=1" in r.stderr and "add.Tensor" in r.stderr
    ok = run_python("import torch_fl", FLAGOS_STRICT="1", FLAGOS_OP_add__Tensor="cpu_fallback")
    assert ok.returncode == 0, ok.stderr


def test_strict_refuses_a_runtime_route_that_can_only_fall_back_and_keeps_the_old_table(routing_state):
    if torch_fl.backing() != "cpu":
        pytest.skip("needs an unavailable backend (host backing)")
    from torch_fl.routing import planner

    planner.set_flags(strict=True)
    with pytest.raises(routing.RoutingError, match="FLAGOS_STRICT=1"):
        routing.set_route("add.Tensor", "flaggems")
    assert all(e.op != "add.Tensor" or e.source != "runtime" for e in routing.table())
    x = torch.ones(2, device="flagos")
    assert torch.equal((x + x).cpu(), torch.full((2,), 2.0))


def test_the_dispatch_log_works_without_stderr():
    r = run_python(
        """
        import sys, torch, torch_fl
        torch_fl.routing.set_log_dispatch(True)
        torch_fl.routing.set_route("add.Tensor", "cpu_fallback")
        sys.stderr = None  # a daemon's
        x = torch.ones(2, device="flagos")
        print((x + x).cpu().tolist(), (x * x).cpu().tolist())
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[2.0, 2.0] [1.0, 1.0]"
