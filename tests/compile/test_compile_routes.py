"""Routes in compiled flagos code: the matmuls inductor leaves as calls run in their out= form (mm.out,
addmm.out, bmm.out, baddbmm.out), which take their functional overload's route; a route compiled code cannot
keep is warned about once, naming it.

Runs on both backings (host memory in CI: inductor's C++ backend, which these graphs need no kernel of).
"""

from __future__ import annotations

import warnings

import pytest
import torch

import torch_fl
from tests.unit.routing_fixtures import flag_gems_with, routing_state  # noqa: F401  (a fixture)
from torch_fl import routing
from torch_fl.backends import flaggems
from torch_fl.compile import graph_pass
from torch_fl.vocab.errors import FallbackWarning

pytestmark = [pytest.mark.anyplatform, pytest.mark.usefixtures("routing_state")]  # routing_state first


def _rows(op: str) -> dict[str, int]:
    return {r.backend: r.calls for r in routing.stats() if r.op == op and r.calls}


def _inputs():
    a = torch.randn(2, 4, 8, device="flagos")
    b = torch.randn(2, 8, 3, device="flagos")
    c = torch.randn(2, 4, 3, device="flagos")
    return a, b, c


CASES = {
    "mm": (lambda a, b, c: a[0] @ b[0], "mm.out"),
    "addmm": (lambda a, b, c: torch.addmm(c[0], a[0], b[0]), "addmm.out"),
    "bmm": (lambda a, b, c: torch.bmm(a, b), "bmm.out"),
    "baddbmm": (lambda a, b, c: torch.baddbmm(c, a, b, beta=0.5), "baddbmm.out"),
}


@pytest.mark.parametrize("op", list(CASES))
def test_a_route_on_a_matmul_holds_for_its_compiled_calls(op):
    fn, out = CASES[op]
    args = _inputs()
    routing.set_route(op, "cpu_fallback")
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # nothing to warn about: the route is kept
        compiled(*args)  # compiles
        routing.reset_stats()
        got = compiled(*args)
        assert _rows(out) == {"cpu_fallback": 1}, routing.stats()  # not the native route
        eager = fn(*args)
    assert _rows(op) == {"cpu_fallback": 1}  # eager takes the functional overload's route, as before
    torch.testing.assert_close(got, eager)
    torch._dynamo.reset()


@pytest.fixture
def gems_mm_without_out():
    """A FlagGems stand-in with mm but no mm.out (FlagGems 5.0's baddbmm has no baddbmm.out either)."""
    calls = []

    def mm(a, b):
        calls.append(a.device.type)
        return torch.mm(a, b)

    flaggems.LOADER.use_module(flag_gems_with({"mm": mm}))
    graph_pass._warned.clear()
    yield calls
    graph_pass._warned.clear()
    flaggems.LOADER.reset()


def test_a_route_compiled_code_cannot_keep_is_warned_once_naming_it(gems_mm_without_out):
    a, b, _ = _inputs()
    routing.set_route("mm", "flaggems")
    entry = {e.op: e for e in routing.table()}["mm.out"]  # flaggems cannot take it: the default file's mm rule
    assert (entry.backend, entry.source.endswith("(via mm)")) == (torch_fl.backing(), True)
    torch._dynamo.reset()
    with pytest.warns(FallbackWarning, match=r"aten::mm is routed to 'flaggems'.*calls aten::mm.out") as w:
        torch.compile(lambda x, y: x[0] @ y[0])(a, b)
    (message,) = [str(x.message) for x in w if issubclass(x.category, FallbackWarning)]
    assert "keep_as_calls(['mm'])" in message and f"run on '{torch_fl.backing()}' instead" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # once per operator
        torch.compile(lambda x, y: (x[1] @ y[1]) * 2)(a, b)
    torch._dynamo.reset()


def test_keeping_the_matmul_as_a_call_keeps_its_route(gems_mm_without_out):
    a, b, _ = _inputs()
    routing.set_route("mm", "flaggems")
    torch._dynamo.reset()
    with torch_fl.compile.keeping_calls(["mm"]), warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        compiled = torch.compile(lambda x, y: x[0] @ y[0])
        compiled(a, b)
        routing.reset_stats()
        got = compiled(a, b)
        assert _rows("mm") == {"flaggems": 1} and not _rows("mm.out")
    assert gems_mm_without_out[-1] == torch_fl._C._backing()
    torch.testing.assert_close(got, a[0] @ b[0])
    torch._dynamo.reset()
