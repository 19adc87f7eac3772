"""Record and replay (route `flaggems`, torch_fl/replay) on host memory, with a stand-in FlagGems using ATen.

The stand-in's functions allocate and compute with torch operators, as
FlagGems' wrappers allocate before their Triton launches; on host memory the
recordings hold those operators only (launches are checked on the GPU:
tests/integration/test_flaggems_replay.py). Each test asserts what the
replay computed against the Python function or torch itself, and how many
times the Python function ran.
"""

from __future__ import annotations

import threading

import pytest
import torch

import torch_fl
from tests.unit.routing_fixtures import flag_gems_with, routing_state  # noqa: F401  (fixture)
from torch_fl import routing
from torch_fl.backends import flaggems
from torch_fl.routing import planner

pytestmark = pytest.mark.anyplatform


def op_name(name: str) -> str:
    """A keyword-safe name as the aten overload: add__Tensor -> add.Tensor, add___Tensor -> add_.Tensor."""
    return name.replace("___", "_.", 1) if "___" in name else name.replace("__", ".", 1)


def fake(**fns):
    """A flag_gems stand-in registering `fns` (aten overload with '.' as '__' -> function)."""
    return flag_gems_with({op_name(name): fn for name, fn in fns.items()})


@pytest.fixture
def gems(routing_state):  # noqa: F811
    """use(**fns) installs a stand-in and routes each of its operators to `flaggems`; counts per function."""
    calls: dict[str, int] = {}

    def use(route="flaggems", ops=None, **fns):
        fns = {**fns, **{op.replace(".", "__"): fn for op, fn in (ops or {}).items()}}

        def counted(name, fn):
            def run(*args, **kwargs):
                calls[name] = calls.get(name, 0) + 1
                return fn(*args, **kwargs)

            return run

        flaggems.LOADER.use_module(fake(**{n: counted(n, f) for n, f in fns.items()}))
        for name in fns:
            routing.set_route(op_name(name), route)
        return calls

    yield use
    flaggems.LOADER.reset()


def stats(op: str) -> dict:
    return torch_fl._C.PyRoute(op).replay_stats()


def add_via_out(a, b, *, alpha=1):
    shape = torch.broadcast_shapes(a.shape, b.shape if isinstance(b, torch.Tensor) else ())
    out = torch.empty(shape, dtype=torch.result_type(a, b), device=a.device)
    return torch.add(a, b, alpha=alpha, out=out)


def test_a_signature_runs_python_once_then_replays_with_the_new_tensors(gems):
    calls = gems(add__Tensor=add_via_out)
    before = stats("add.Tensor")
    for i in range(5):
        a = torch.full((3, 4), float(i), device="flagos")
        b = torch.arange(12.0, device="flagos").view(3, 4)
        out = a + b
        assert out.device == a.device
        assert torch.equal(out.cpu(), torch.full((3, 4), float(i)) + torch.arange(12.0).view(3, 4))
    after = stats("add.Tensor")
    assert calls["add__Tensor"] == 1
    assert after["hits"] - before["hits"] == 4 and after["recorded"] - before["recorded"] == 1
    assert after["programs"] == 1 and after["signatures"] == 1


@pytest.mark.parametrize(
    "make",
    [
        lambda: (torch.ones(2, 3), torch.ones(3)),  # another shape (broadcasting)
        lambda: (torch.ones(3, 2).t(), torch.ones(2, 3)),  # other strides
        lambda: (torch.ones(2, 3, dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64)),  # another dtype
        lambda: (torch.ones(7)[1:], torch.ones(6)),  # a storage offset
    ],
    ids=["shape", "strides", "dtype", "offset"],
)
def test_each_new_signature_records_once(gems, make):
    calls = gems(add__Tensor=add_via_out)
    base = (torch.ones(2, 3, device="flagos"), torch.ones(2, 3, device="flagos"))
    torch.add(*base)
    a, b = (t.to("flagos") for t in make())
    for _ in range(3):
        assert torch.equal(torch.add(a, b).cpu(), torch.add(a.cpu(), b.cpu()))
    assert calls["add__Tensor"] == 2


def test_scalar_values_and_aliasing_are_part_of_the_signature(gems):
    calls = gems(add__Tensor=add_via_out)
    x = torch.arange(4.0, device="flagos")
    y = torch.ones(4, device="flagos")
    for alpha in (1, 2, 2.5, 1):
        assert torch.equal(torch.add(x, y, alpha=alpha).cpu(), torch.add(x.cpu(), y.cpu(), alpha=alpha))
    assert calls["add__Tensor"] == 3  # alpha 1, 2, 2.5
    assert torch.equal((x + x).cpu(), x.cpu() * 2)  # the same tensor twice: another signature
    assert torch.equal((x + 1.5).cpu(), x.cpu() + 1.5)  # a Python number: its value is keyed
    assert torch.equal((x + 2.5).cpu(), x.cpu() + 2.5)
    assert calls["add__Tensor"] == 6


def test_in_place_and_out_variants_write_the_callers_tensors(gems):
    def add_(a, b, *, alpha=1):
        return a.add_(b, alpha=alpha)

    def abs_out(a, *, out):
        return torch.abs(a, out=out)

    calls = gems(ops={"add_.Tensor": add_, "abs.out": abs_out})
    for i in range(3):
        x = torch.full((5,), float(i), device="flagos")
        r = x.add_(torch.ones(5, device="flagos"))
        assert r is x and torch.equal(x.cpu(), torch.full((5,), i + 1.0))
        out = torch.empty(5, device="flagos")
        r = torch.abs(-x, out=out)
        assert r is out and torch.equal(out.cpu(), torch.full((5,), i + 1.0))
    assert calls == {"add___Tensor": 1, "abs__out": 1}


def test_results_that_view_an_allocation_and_several_results(gems):
    def softmax(a, dim, half_to_float):
        flat = a.reshape(-1, a.shape[-1])
        out = torch.empty_like(flat)
        torch.softmax(flat, -1, out=out)
        return out.view(a.shape)

    def max_dim(a, dim, keepdim=False):
        return torch.max(a.clone(), dim, keepdim)

    calls = gems(_softmax=softmax, max__dim=max_dim)
    for i in range(3):
        x = torch.randn(2, 3, 4) + i
        got = torch.softmax(x.to("flagos"), -1)
        assert got.shape == x.shape
        torch.testing.assert_close(got.cpu(), torch.softmax(x, -1))  # the backing device's softmax
        values, indices = torch.max(x.to("flagos"), 1)
        ref = torch.max(x, 1)
        assert torch.equal(values.cpu(), ref.values) and torch.equal(indices.cpu(), ref.indices)
    assert calls == {"_softmax": 1, "max__dim": 1}


def test_tensor_list_arguments(gems):
    def cat(tensors, dim=0):
        return torch.cat([t.contiguous() for t in tensors], dim)

    calls = gems(cat=cat)
    for i in range(3):
        parts = [torch.full((2, k + 1), float(i + k)) for k in range(3)]
        got = torch.cat([p.to("flagos") for p in parts], 1)
        assert torch.equal(got.cpu(), torch.cat(parts, 1))
    assert calls == {"cat": 1}


def test_a_function_that_reads_tensor_values_stays_on_python_with_the_reason(gems):
    def mul(a, b):
        scale = float(b.abs().max().item())  # decides on the host from the data
        return torch.mul(a, b) if scale < 100 else torch.zeros_like(a)

    calls = gems(mul__Tensor=mul)
    before = stats("mul.Tensor")
    for big in (1.0, 1000.0, 1.0):
        x = torch.ones(4, device="flagos")
        y = torch.full((4,), big, device="flagos")
        assert torch.equal((x * y).cpu(), torch.ones(4) * big if big < 100 else torch.zeros(4))
    after = stats("mul.Tensor")
    assert calls["mul__Tensor"] == 3 and after["hits"] == before["hits"]
    [(why, n)] = [(w, n) for w, n in after["reasons"].items() if "reads tensor values" in w]
    assert "aten.item" in why and n >= 2
    shown = str(routing.explain("mul.Tensor"))
    assert "replay:" in shown and "stays on Python" in shown and "reads tensor values" in shown


def test_a_function_using_memory_from_outside_the_call_stays_on_python(gems):
    x = torch.zeros(3, device="flagos")
    buf = torch_fl._C.as_native(x).clone()  # a buffer made before the call, kept across calls

    def neg(a):
        return torch.neg(a, out=buf).clone()

    calls = gems(neg=neg)
    for i in range(3):
        x = torch.full((3,), float(i), device="flagos")
        assert torch.equal((-x).cpu(), torch.full((3,), -float(i)))
    assert calls["neg"] == 3
    assert any("outside the call" in why for why in stats("neg")["reasons"])


def test_the_python_route_never_records(gems):
    calls = gems(route="flaggems_python", add__Tensor=add_via_out)
    before = stats("add.Tensor")
    x = torch.ones(3, device="flagos")
    for _ in range(3):
        x + x
    assert calls["add__Tensor"] == 3
    after = stats("add.Tensor")
    assert after["hits"] == before["hits"] and after["recorded"] == before["recorded"]


def test_the_cache_keeps_at_most_its_capacity(gems):
    calls = gems(add__Tensor=add_via_out)
    route = torch_fl._C.PyRoute("add.Tensor")
    old = route.replay_capacity
    route.replay_capacity = 2
    try:
        before = stats("add.Tensor")
        for n in (1, 2, 3, 1):
            x = torch.ones(n, device="flagos")
            assert torch.equal((x + x).cpu(), torch.full((n,), 2.0))
        after = stats("add.Tensor")
        assert after["signatures"] <= 2 and after["evicted"] - before["evicted"] >= 2
        assert calls["add__Tensor"] == 4  # shape 1 was evicted by shape 3, and recorded again
    finally:
        route.replay_capacity = old


def test_the_dispatch_log_names_flaggems_for_recorded_and_replayed_calls(gems, capfd):
    gems(add__Tensor=add_via_out)
    x = torch.ones(3, device="flagos")
    planner.set_flags(log_dispatch=True)
    try:
        x + x
        x + x
    finally:
        planner.set_flags(log_dispatch=False)
    lines = [ln for ln in capfd.readouterr().err.splitlines() if "add.Tensor" in ln]
    assert lines == ["[flagos dispatch] add.Tensor -> flaggems"] * 2


def test_replays_from_several_threads_agree(gems):
    gems(add__Tensor=add_via_out)
    x = torch.arange(64.0, device="flagos")
    x + x  # recorded
    errors = []

    def work(k):
        try:
            for i in range(50):
                y = torch.full((64,), float(k * 100 + i), device="flagos")
                if not torch.equal((x + y).cpu(), torch.arange(64.0) + (k * 100 + i)):
                    errors.append((k, i))
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_an_empty_input_runs_natively_as_before(gems):
    calls = gems(add__Tensor=add_via_out)
    e = torch.ones(0, device="flagos")
    with pytest.warns(Warning):
        assert (e + e).shape == (0,)
    assert calls.get("add__Tensor", 0) == 0


def test_an_operator_that_may_copy_is_run_again_when_it_copied(gems):
    """Below autograd `contiguous` arrives whole: a copy for a transposed input, the input itself otherwise."""

    def neg(a):
        c = a.contiguous()
        out = torch.empty_like(c)
        return torch.neg(c, out=out)

    calls = gems(neg=neg)
    for i in range(3):
        t = (torch.arange(12.0).view(3, 4) + i).t()  # transposed: contiguous() copies
        assert torch.equal((-t.to("flagos")).cpu(), -t)
        c = torch.arange(6.0) + i  # contiguous: contiguous() is the input
        assert torch.equal((-c.to("flagos")).cpu(), -c)
    assert calls["neg"] == 2


def test_a_call_that_cannot_be_keyed_runs_python_each_time_with_the_reason(gems):
    calls = gems(add__Tensor=add_via_out)
    x = torch.ones(3, device="flagos")
    for i in range(3):
        two = torch.tensor(2.0 + i)  # a host tensor (not a Python number): its values are not keyed
        assert torch.equal((x + two).cpu(), torch.full((3,), 3.0 + i))
    assert calls["add__Tensor"] == 3
    assert (
        stats("add.Tensor")["reasons"].get(
            "an argument cannot be keyed (a host tensor, a generator, a complex or symbolic number)", 0
        )
        >= 3
    )


@pytest.mark.parametrize("dtype, other", [(torch.float32, 1e-6), (torch.float32, 1), (torch.int64, 2.5), (None, "t")])
def test_torch_fls_own_checks_are_not_recorded(gems, dtype, other):
    """The checks run before a FlagGems function (flaggems_defects.guarded: the dtypes judged by PyTorch's meta
    kernel, once per dtype signature) are torch_fl's, not the function's: the first call's recording holds the
    function's operators alone, so later calls replay them without the checks' (a Python number among the
    meta call's tensors made the recording unreplayable; a tensor made every replay run the meta call). A Python
    number the function hands an operator replays as one (int64 + 2.5 is float32, as on the CPU)."""
    from torch_fl.backends.flaggems_defects import guarded
    from torch_fl.replay import record

    x = torch.arange(3, dtype=dtype, device="flagos")
    b = torch.ones(3, device="flagos") if other == "t" else other
    _, program = record(guarded(add_via_out, "add.Tensor"), (x, b), {}, ("Tensor",))
    assert [(step[1], step[2]) for step in program["steps"]] == [("aten::empty", "memory_format"), ("aten::add", "out")]
    calls, before = gems(add__Tensor=add_via_out), stats("add.Tensor")
    for _ in range(3):
        got, want = (x + b).cpu(), x.cpu() + (b.cpu() if other == "t" else b)
        assert got.dtype == want.dtype and torch.equal(got, want)
    after = stats("add.Tensor")
    assert calls["add__Tensor"] == 1 and after["python"] == before["python"]
    assert after["hits"] - before["hits"] == 2


@pytest.mark.parametrize(
    "op, args, kwargs",
    [
        ("add.Tensor", lambda t: (t[0], t[1]), lambda t: {"alpha": 2}),
        ("add.out", lambda t: (t[0], t[0]), lambda t: {"alpha": 1, "out": t[2]}),
        ("cat", lambda t: ([t[0], t[1], t[2]],), lambda t: {"dim": 0}),
        ("index.Tensor", lambda t: (t[0], [None, t[3], None, t[4]]), lambda t: {}),
        ("where.self", lambda t: (t[5], t[1], t[0]), lambda t: {}),
        ("addcmul", lambda t: (t[2], t[1], t[0]), lambda t: {"value": 0.5}),
        ("clamp.Tensor", lambda t: (t[0], None, t[1]), lambda t: {}),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_the_recorder_and_the_core_agree_on_the_slot_order(op, args, kwargs):
    """A recording names the call's tensors by slot: the recorder (torch_fl.replay.input_tensors) and the
    core's replay (replay::input_tensors, csrc/replay/README.md) must number them alike."""
    from torch_fl import replay

    t = [torch.randn(4) for _ in range(3)] + [torch.tensor([0, 1]), torch.tensor([1, 0])] + [torch.rand(4) > 0.5]
    a, kw = args(t), kwargs(t)
    python = replay.input_tensors(a, kw)
    core = torch_fl._C._replay_input_tensors(op, a, kw)
    assert len(python) > 0 and [id(x) for x in python] == [id(x) for x in core]
