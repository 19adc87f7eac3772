"""torch.compile(mode="reduce-overhead") on flagos, on host memory: the warning, and the bookkeeping of
torch_fl/compile/cudagraphs.py's captures (per static input addresses, per size, fresh outputs) with stand-in
captures; the CUDA graphs themselves are tested in test_compile_cuda.py."""

from __future__ import annotations

import pytest
import torch

import torch_fl

pytestmark = pytest.mark.anyplatform


@pytest.mark.skipif(torch_fl.backing() == "cuda", reason="host memory's warning: a CUDA backing captures the graph")
def test_reduce_overhead_says_flagos_runs_without_cuda_graphs():
    torch._dynamo.reset()
    x = torch.randn(4, device="flagos")
    with pytest.warns(UserWarning, match="flagos graphs run without CUDA graphs") as seen:
        out = torch.compile(lambda t: t * 3 - 1, mode="reduce-overhead")(x)
    torch.testing.assert_close(out, x * 3 - 1)
    assert sum("without CUDA graphs" in str(w.message) for w in seen) == 1  # once per graph


def test_reduce_overhead_warms_up_then_captures_per_set_of_static_input_addresses():
    from torch_fl.compile import cudagraphs

    captured, warmed = [], []

    def warm_up(inputs):  # the first call runs the graph itself
        warmed.append(inputs[0])
        return inputs[0] + inputs[1]

    def capture(inputs):  # a capture replays over the static input it saw
        seen = inputs[0]
        captured.append(seen)
        return lambda new_inputs: seen + new_inputs[1]

    run = cudagraphs._by_static_inputs(warm_up, capture, [0])
    x = torch.ones(2, device="flagos")
    caches = [torch.full((2,), float(i), device="flagos") for i in range(cudagraphs.CAPTURES_KEPT + 1)]
    assert run([caches[0], x]).tolist() == [1.0, 1.0] and not captured  # the warm-up, no capture yet
    assert run([caches[0], x]).tolist() == [1.0, 1.0] and len(captured) == 1  # the capture, replayed
    assert run([caches[0], x]).tolist() == [1.0, 1.0] and len(captured) == 1 and len(warmed) == 1  # a replay
    assert run([caches[1], x]).tolist() == [2.0, 2.0]  # moved: captured anew, not replayed over caches[0]
    assert run([caches[0], x]).tolist() == [1.0, 1.0] and len(captured) == 2  # kept
    for c in caches[2:]:
        run([c, x])
    run([caches[0], x])  # used last but one: still kept
    run([caches[1], x])  # the least recently used went when a fifth came
    assert [c is caches[0] for c in captured].count(True) == 1
    assert [c is caches[1] for c in captured].count(True) == 2


def test_reduce_overhead_outputs_are_copied_keeping_shared_storage_and_strides():
    from torch_fl.compile.cudagraphs import fresh_copies

    base = torch.arange(24.0, device="flagos").reshape(4, 6)
    param = torch.ones(2, device="flagos")
    outputs = [base, base.t(), base[1:, ::2], torch.ones(3, device="flagos"), 7, param]
    fresh = fresh_copies(outputs, keep={param.untyped_storage().data_ptr()})
    assert fresh[4] == 7 and fresh[5] is param  # a static input's memory is handed out as it is
    for old, new in zip(outputs[:4], fresh[:4], strict=True):
        assert new.device == old.device and new.stride() == old.stride() and torch.equal(new, old)
        assert new.untyped_storage().data_ptr() != old.untyped_storage().data_ptr()
    # the three views of one storage share one copy, as they shared the original
    assert len({t.untyped_storage().data_ptr() for t in fresh[:3]}) == 1
    base.zero_()
    assert fresh[0].sum().item() == sum(range(24))


def test_reduce_overhead_captures_a_dynamic_shape_graph_per_size_with_its_sizes_bound():
    from torch_fl.compile import cudagraphs

    made, seen = [], []

    def captures(ints, count):  # a capture per size: it sees the inputs without the ints
        made.append((ints, count))
        return lambda inputs: seen.append(list(inputs)) or ints

    x = torch.ones(2, device="flagos")
    run = cudagraphs._by_int_inputs([x, 4, x, 8], captures)
    for sizes in ((4, 8), (2, 8), (4, 8)):
        args = [x, sizes[0], x, sizes[1]]
        assert run(args) == {1: sizes[0], 3: sizes[1]} and args == []  # emptied, as inductor's callables do
    assert made == [({1: 4, 3: 8}, 4), ({1: 2, 3: 8}, 4)] and all(len(s) == 2 for s in seen)
    assert cudagraphs._by_int_inputs([x], captures)([x]) == {}  # no ints: one set of captures, inputs as they are
    graph = cudagraphs._with_ints(lambda full: list(full), {1: 4, 3: 8})  # the ints put back where they were
    assert graph([x, x]) == [x, 4, x, 8]
