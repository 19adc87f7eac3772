"""FlagGems recorded and replayed on a GPU: replays are bitwise its Python function, value-dependent calls stay on it.

Each case runs three times on twins of the same inputs (same storage size,
offset and strides, so the same alignment): routed to `flaggems_python`
(FlagGems' Python function), then to `flaggems` twice (the first call of a
signature is recorded, the second replayed from C++). The replay's results
and the inputs it wrote must equal the Python function's bit for bit.
"""

from __future__ import annotations

import pytest
import torch

import torch_fl
from tests.unit.routing_fixtures import routing_state  # noqa: F401  (fixture)
from torch_fl import routing
from torch_fl.backends import flaggems
from torch_fl.backends.flaggems_defects import refusal

pytestmark = [pytest.mark.flaggems, pytest.mark.cuda, pytest.mark.usefixtures("routing_state")]

ON_GPU = torch_fl.backing() == "cuda"
if ON_GPU:
    flaggems.LOADER.load()
HAS_FLAGGEMS = ON_GPU and flaggems.LOADER.module is not None
requires_flaggems = pytest.mark.skipif(not HAS_FLAGGEMS, reason="needs a GPU and flag_gems installed")


def twin(t):
    """A copy of `t` with its own storage of the same size, at the same offset with the same strides."""
    if not isinstance(t, torch.Tensor):
        return t
    raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
    copy = raw.clone().untyped_storage()
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(copy, t.storage_offset(), t.shape, t.stride())


def bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous().cpu()
    if t.is_floating_point():
        return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and a.stride() == b.stride()
            and torch.equal(bits(a), bits(b))
        )
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def run_three_ways(fn, inputs, ops):
    """(python results, recorded results, replayed results, python inputs after, replayed inputs after, hits)."""
    twins = [[twin(t) for t in inputs] for _ in range(3)]
    for op in ops:
        routing.set_route(op, "flaggems_python")
    python = fn(*twins[0])
    for op in ops:
        routing.set_route(op, "flaggems")
    before = sum(torch_fl._C.PyRoute(op).replay_stats()["hits"] for op in ops)
    recorded = fn(*twins[1])
    replayed = fn(*twins[2])
    hits = sum(torch_fl._C.PyRoute(op).replay_stats()["hits"] for op in ops) - before
    torch.cuda.synchronize()
    return python, recorded, replayed, twins[0], twins[2], hits


def randn(*shape, dtype=torch.float32):
    return torch.randn(shape, device="flagos").to(dtype)


SHAPES = [
    ((), ()),
    ((7,), (7,)),
    ((4, 33), (4, 33)),
    ((3, 1, 5), (1, 4, 5)),  # broadcasting
    ("t", "t"),  # a transposed operand
    ("slice", "slice"),  # a storage offset and a step
]


def operand(shape, dtype):
    if shape == "t":
        return randn(33, 4, dtype=dtype).t()
    if shape == "slice":
        return randn(9, 12, dtype=dtype)[1:, ::2]
    return randn(*shape, dtype=dtype)


BINARY = {
    "add.Tensor": lambda x, y: torch.add(x, y, alpha=2),
    "sub.Tensor": lambda x, y: x - y,
    "mul.Tensor": lambda x, y: x * y,
    "div.Tensor": lambda x, y: x / (y.abs() + 1),
    "where.self": lambda x, y: torch.where(x > 0, x, y),
}
UNARY = {
    "neg": torch.neg,
    "abs": torch.abs,
    "exp": torch.exp,
    "cos": torch.cos,
    "sin": torch.sin,
    "rsqrt": lambda x: torch.rsqrt(x.abs() + 0.5),
    "silu": torch.nn.functional.silu,
    "sigmoid": torch.sigmoid,
    "pow.Tensor_Scalar": lambda x: torch.pow(x, 2),
    "mul.Scalar": lambda x: torch.mul(x, 3.5),
    "add.Tensor": lambda x: x + 1e-6,  # a Python number in a Tensor argument (RMSNorm's eps): a wrapped number
}


def check(fn, inputs, ops, expect_replay=True):
    """With `expect_replay`, the second `flaggems` call replays; a call that a known FlagGems defect refuses
    (flaggems_defects) runs natively on every route instead and is never replayed."""
    flaggems.LOADER.load()
    missing = [op for op in ops if op not in flaggems.LOADER.table]
    if missing:
        pytest.skip(f"FlagGems {flaggems.LOADER.version()} has no kernel for {missing}")
    refused = refusal(flaggems.LOADER.table[ops[0]], *inputs)
    python, recorded, replayed, py_in, rep_in, hits = run_three_ways(fn, inputs, ops)
    assert same(python, recorded), "the recorded call differs from the Python function"
    assert same(python, replayed), "the replay differs from the Python function"
    assert all(same(a, b) for a, b in zip(py_in, rep_in, strict=True)), "the replay wrote other inputs"
    if refused is not None:
        assert hits == 0, f"a call FlagGems gets wrong was replayed: {refused}"
        assert any(r.op == ops[0] and r.fallbacks for r in routing.stats()), "the refusal was not counted"
    elif expect_replay:
        assert hits >= 1, f"no replay: {[torch_fl._C.PyRoute(op).replay_stats()['reasons'] for op in ops]}"


@requires_flaggems
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: str(s[0]))
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_replays_equal_python(op, shapes, dtype):
    x, y = operand(shapes[0], dtype), operand(shapes[1], dtype)
    fn = BINARY[op]
    check(lambda a, b: fn(a, b), [x, y], [op] + (["gt.Scalar"] if op == "where.self" else []))


@requires_flaggems
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(), (1,), (5, 7), "t", "slice"], ids=str)
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_replays_equal_python(op, shape, dtype):
    check(UNARY[op], [operand(shape, dtype)], [op])


@requires_flaggems
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "case",
    [
        ("mean.dim", lambda x: x.mean(-1, keepdim=True)),
        ("sum.dim_IntList", lambda x: x.sum((0, 2))),
        ("_softmax", lambda x: torch.softmax(x, -1)),
        ("_log_softmax", lambda x: torch.log_softmax(x, 1)),
        ("native_layer_norm", lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:])),
        ("cumsum", lambda x: torch.cumsum(x, 1)),
        ("amax", lambda x: torch.amax(x, -1)),
        ("argmax", lambda x: torch.argmax(x, -1)),
    ],
    ids=lambda c: c[0],
)
def test_reductions_replay_equal_python(case, dtype):
    op, fn = case
    for shape in [(2, 3, 64), (4, 5, 1000), (1, 1, 1)]:
        check(fn, [randn(*shape, dtype=dtype)], [op])


@requires_flaggems
@pytest.mark.parametrize(
    "case",
    [
        ("cat", lambda a, b: torch.cat([a, b, a], 1)),
        ("add_.Tensor", lambda a, b: a.add_(b)),  # in place: the replay writes the caller's tensor
        ("fill_.Scalar", lambda a, b: a.fill_(2.5)),
        ("zero_", lambda a, b: a.zero_()),
        ("embedding", lambda a, b: torch.nn.functional.embedding((b.abs() * 3).long() % 5, a)),
        ("index_select", lambda a, b: torch.index_select(a, 0, (b[:, 0].abs() * 2).long() % 5)),
        ("masked_fill.Scalar", lambda a, b: a.masked_fill(b > 0, -1.0)),
        ("triu", lambda a, b: torch.triu(a, 1)),
        ("clone", lambda a, b: b.clone()),
    ],
    ids=lambda c: c[0],
)
def test_other_operators_replay_equal_python(case):
    op, fn = case
    check(fn, [randn(5, 6), randn(5, 6)], [op])


@requires_flaggems
@pytest.mark.parametrize(
    "case",
    [
        ("zeros", lambda: torch.zeros(3, 5, device="flagos")),
        ("full", lambda: torch.full((2, 3), 1.5, device="flagos")),
        ("arange.start_step", lambda: torch.arange(1, 20, 3, device="flagos")),
    ],
    ids=lambda c: c[0],
)
def test_factories_replay_equal_python(case):
    op, fn = case
    check(fn, [], [op])


@requires_flaggems
def test_random_operators_stay_on_the_python_function():
    """FlagGems draws seeds from the generator's state on the host: a replay would repeat its numbers."""
    x = torch.ones(1000, device="flagos")
    flaggems.LOADER.load()
    missing = [op for op in ("native_dropout", "uniform_") if op not in flaggems.LOADER.table]
    if missing:
        pytest.skip(f"FlagGems {flaggems.LOADER.version()} has no kernel for {missing}")
    routing.set_route("native_dropout", "flaggems")
    routing.set_route("uniform_", "flaggems")
    masks = [torch.nn.functional.dropout(x, 0.5, training=True) for _ in range(3)]
    draws = [torch.empty(1000, device="flagos").uniform_() for _ in range(3)]
    assert not torch.equal(masks[1], masks[2]) and not torch.equal(draws[1], draws[2])
    for op in ("native_dropout", "uniform_"):
        s = torch_fl._C.PyRoute(op).replay_stats()
        assert s["programs"] == 0 and s["python"] >= 2 and s["reasons"], s


@requires_flaggems
def test_a_replay_runs_on_the_current_stream_and_in_a_cuda_graph():
    x, y = randn(64, 64), randn(64, 64)
    routing.set_route("add.Tensor", "flaggems")
    x + y  # recorded
    side = torch.flagos.Stream()
    with torch.flagos.stream(side):
        z = x + y  # replayed on `side`
    side.synchronize()
    assert torch.equal(z.cpu(), (x.cpu() + y.cpu()))
    graph = torch.cuda.CUDAGraph()
    static_x = x.clone()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        static_x + y  # warm-up outside capture
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            out = static_x + y
    before = torch_fl._C.PyRoute("add.Tensor").replay_stats()["hits"]
    for k in range(3):
        static_x.copy_(torch.full_like(static_x, float(k)))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out.cpu(), float(k) + y.cpu())
    assert torch_fl._C.PyRoute("add.Tensor").replay_stats()["hits"] == before  # replays of the graph, not calls
