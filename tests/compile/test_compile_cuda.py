"""torch.compile on flagos backed by CUDA: Triton kernels on the flagos tensors' CUDA memory, on the current
flagos stream; SDPA as CUDA's fused kernel; Qwen3-0.6B compiled like native CUDA (the lead's H200 run)."""

from __future__ import annotations

import logging
import re

import pytest
import torch

import torch_fl
from tests.compile.generated_code import call_body, run_and_get_code
from torch_fl import routing
from torch_fl.flagos._streams import native_stream

pytestmark = pytest.mark.cuda


def test_triton_kernels_run_on_the_current_flagos_stream():
    torch._dynamo.reset()
    x = torch.randn(1024, 512, device="flagos")

    def fn(x):
        return torch.relu(x * 2 + 1).sum(-1)

    compiled = torch.compile(fn, fullgraph=True)
    side = torch.flagos.Stream()
    side.wait_stream(torch.flagos.current_stream())
    with torch.flagos.stream(side):
        out, (code,) = run_and_get_code(compiled, x)
    torch.flagos.current_stream().wait_stream(side)
    torch.testing.assert_close(out, fn(x))
    assert out.device.type == "flagos"
    assert "get_raw_stream(" in code and "triton_" in code and "torch.flagos.device(0)" in code
    # The raw stream the wrapper reads is the current flagos stream's CUDA stream.
    with torch.flagos.stream(side):
        from torch._dynamo.device_interface import get_interface_for_device

        assert get_interface_for_device("flagos").get_raw_stream(0) == native_stream(side).cuda_stream


def test_triton_targets_the_cuda_device_behind_flagos():
    from torch._inductor.runtime.hints import DeviceProperties

    torch_fl.compile.register()
    props = DeviceProperties.create(torch.device("flagos", 0))
    assert props.type == "cuda" and props.index == 0
    assert props.cc == DeviceProperties.create(torch.device("cuda", 0)).cc


def test_matrix_products_take_cudas_template_configs_with_no_error_logged():
    from torch._inductor.template_heuristics import registry
    from torch._inductor.template_heuristics.registry import get_template_heuristic

    torch_fl.compile.register()
    torch._dynamo.reset()
    a, b = (torch.randn(4, 64, 32, device="flagos") for _ in range(2))
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    registry.log.addHandler(handler)  # torch's loggers do not propagate to pytest's
    try:
        out = torch.compile(lambda a, b: (a @ b.transpose(1, 2)).relu(), fullgraph=True)(a, b)
    finally:
        registry.log.removeHandler(handler)
    torch.testing.assert_close(out, (a @ b.transpose(1, 2)).relu())
    assert [r.getMessage() for r in records if r.levelno >= logging.ERROR] == []
    for template, op in (("triton::mm", "mm"), ("triton::bmm", "bmm"), ("triton::mm", "addmm")):
        cuda, flagos = get_template_heuristic(template, "cuda", op), get_template_heuristic(template, "flagos", op)
        assert type(flagos) is type(cuda)


def test_sdpa_compiles_to_cudas_fused_kernel():
    torch._dynamo.reset()
    q = torch.randn(2, 8, 256, 64, device="flagos", dtype=torch.bfloat16)

    def fn(q):
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)

    with torch.no_grad():
        out, (code,) = run_and_get_code(torch.compile(fn, fullgraph=True), q)
        routing.reset_stats()
        torch.compile(fn, fullgraph=True)(q)
        native = [r.op for r in routing.stats() if r.calls and "attention" in r.op]
        with routing.route({"neg": "cpu_fallback"}):  # an operator routed away: the call takes its flagos route
            routing.reset_stats()
            torch.compile(fn, fullgraph=True)(q)
            routed = [r.op for r in routing.stats() if r.calls and "attention" in r.op]
    torch.testing.assert_close(out, fn(q), rtol=2e-2, atol=2e-2)
    assert "_scaled_dot_product_flash_attention" in code or "_scaled_dot_product_cudnn_attention" in code
    assert not native and routed  # CUDA's own call inside the graph while every route is native


def test_a_bmm_of_one_batch_compiles_as_native_cudas_does():
    """No extern bmm for a batch of one (it would copy the expanded operand): mm, as inductor writes for cuda,
    or no extern call where this torch decomposes the outer product; the generated code allocates with
    torch_fl's C++ function."""
    torch._dynamo.reset()

    def fn(a, b):
        return torch.bmm(a.expand(1, a.size(1), 1), b).cos() * 2

    a, b = torch.randn(1, 64, 1, device="flagos"), torch.randn(1, 1, 512, device="flagos")
    out, (code,) = run_and_get_code(torch.compile(fn, fullgraph=True), a, b)
    torch.testing.assert_close(out, fn(a, b))
    assert "extern_kernels.bmm(" not in code
    call = call_body(code)
    assert "graph_empty_strided(" in call and "device='flagos" not in call


def test_a_graph_compiles_to_the_kernels_and_bits_of_the_same_graph_on_cuda():
    # Qwen3's RMSNorm and rotary embedding (a bmm of a batch of one, rewritten for flagos by torch_fl's pass).
    # Inductor names a fused kernel after its nodes' origins and caches its tuned configuration by its source:
    # a kernel named otherwise was tuned apart, and a reduction tuned otherwise sums in another order (Hugging
    # Face's compiled generate then picked other tokens than CUDA's).
    def fn(x, w, inv_freq, pos):
        freqs = (inv_freq[None, :, None].expand(1, -1, 1) @ pos[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        h = x.float()
        h = (w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)).float()
        return (h * emb.cos() + h * emb.sin()).to(x.dtype)

    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(1, 1, 128, generator=gen).bfloat16(), torch.randn(128, generator=gen).bfloat16()
    args = (x, w, torch.rand(64, generator=gen), torch.tensor([[5]]))
    names, outs = {}, {}
    for device in ("cuda", "flagos"):
        torch._dynamo.reset()
        outs[device], (code,) = run_and_get_code(torch.compile(fn, fullgraph=True), *(a.to(device) for a in args))
        names[device] = re.findall(r"def (triton_\w+)\(", code)
    assert names["cuda"] and names["flagos"] == names["cuda"]
    assert torch.equal(outs["flagos"].cpu(), outs["cuda"].cpu())


def test_qwen3_0_6b_compiled_prefill_and_training_step():
    pytest.importorskip("transformers")
    from torch_fl.models import qwen3

    torch._dynamo.reset()
    model = qwen3.build("0.6b", seed=0, dtype=torch.bfloat16).to("flagos")
    ids = qwen3.tokens(model.config.vocab_size, 1, 128, seed=1).to("flagos")
    compiled = torch.compile(model)
    with torch.no_grad():
        eager = model(input_ids=ids, use_cache=False).logits.float()
        out = compiled(input_ids=ids, use_cache=False).logits.float()
    torch.testing.assert_close(out, eager, rtol=5e-2, atol=5e-2)
    model.train()
    loss = compiled(input_ids=ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss).item()
    assert all(p.grad is not None and p.grad.device.type == "flagos" for p in model.parameters() if p.requires_grad)


def _mlp(dropout: float = 0.0):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Dropout(dropout), torch.nn.Linear(128, 64)]
    return torch.nn.Sequential(*layers).to("flagos")


def _mm_calls() -> int:
    return sum(r.calls for r in routing.stats() if r.op.startswith(("mm", "addmm")))


def test_reduce_overhead_replays_a_cuda_graph_with_fresh_outputs():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = _mlp()
    compiled = torch.compile(model, mode="reduce-overhead")
    xs = [torch.randn(8, 64, device="flagos") for _ in range(5)]
    with torch.no_grad():
        outs = [compiled(x) for x in xs[:3]]  # warm-up, capture, first replay
        routed = _mm_calls()
        outs += [compiled(x) for x in xs[3:]]
        assert _mm_calls() == routed  # replays go through no route
        for x, out in zip(xs, outs, strict=True):  # each call's outputs survive the later calls
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert counters["inductor"]["cudagraph_skips"] == 0
    assert all(o.device.type == "flagos" for o in outs)
    assert len({o.data_ptr() for o in outs}) == len(outs)


def test_reduce_overhead_captures_again_when_a_static_input_moves():
    # A cache marked a static input (as Hugging Face's static cache is) and made anew: a replay over the first
    # cache's memory would write and read that one.
    torch._dynamo.reset()

    def step(cache, pos, x):
        cache.index_copy_(0, pos, x)
        return cache * 1

    compiled = torch.compile(step, mode="reduce-overhead")
    with torch.no_grad():
        for i in range(3):
            cache = torch.zeros(8, device="flagos")
            torch._dynamo.mark_static_address(cache)
            for n in range(3):
                out = compiled(cache, torch.tensor([n], device="flagos"), torch.full((1,), i + 1.0, device="flagos"))
                want = torch.tensor([i + 1.0] * (n + 1) + [0.0] * (7 - n))
                assert torch.equal(out.cpu(), want) and torch.equal(cache.cpu(), want)


def test_reduce_overhead_warms_a_graph_up_once_and_only_records_for_a_moved_static_input():
    # generate() with Hugging Face's static cache makes a new cache each call: the graph's first call is its warm-up
    # (it runs, routing its matrix product once, and returns its outputs), each later cache is captured with no
    # warm-up of its own (routed once, by the capture).
    torch._dynamo.reset()
    w = torch.randn(16, 16, device="flagos")

    def step(cache, x):
        cache.add_(x @ w)
        return cache * 1

    compiled = torch.compile(step, mode="reduce-overhead")
    routed = []
    with torch.no_grad():
        for _ in range(3):
            cache = torch.zeros(4, 16, device="flagos")
            torch._dynamo.mark_static_address(cache)
            x = torch.randn(4, 16, device="flagos")
            before = _mm_calls()
            out = compiled(cache, x)
            routed.append(_mm_calls() - before)
            torch.testing.assert_close(cache, x @ w)  # written once
            torch.testing.assert_close(out, x @ w)
            torch.testing.assert_close(compiled(cache, x), 2 * (x @ w))  # a replay over this cache
    assert routed == [1, 1, 1], routed  # the warm-up (its capture comes with the replay), then captures alone


def test_reduce_overhead_keeps_no_dropped_static_input_alive():
    # generate() drops its static cache at the end: the capture made for it must not hold the cache's memory, as
    # inductor's cudagraph trees hold only its address. A cache of 64 MiB, dropped after its capture, is freed.
    torch._dynamo.reset()

    def step(cache, x):
        cache.add_(x)
        return cache[:4] * 1

    compiled = torch.compile(step, mode="reduce-overhead")
    x = torch.ones(1, 1024, device="flagos")
    with torch.no_grad():
        for i in range(3):
            cache = torch.zeros(16 * 1024, 1024, device="flagos")
            torch._dynamo.mark_static_address(cache)
            assert compiled(cache, x)[0, 0].item() == 1.0 and compiled(cache, x)[0, 0].item() == 2.0
            torch.flagos.synchronize()
            del cache
            if i == 0:
                after_first = torch.flagos.memory_allocated()
        # two more captures later, memory is where it was after the first cache was dropped
        assert torch.flagos.memory_allocated() - after_first < 4 * 2**20


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic", "automatic-dynamic"])
def test_reduce_overhead_captures_a_dynamic_shape_graph_per_size(dynamic):
    # Its sizes are int inputs (after a size changes, Dynamo's automatic dynamic makes the graph so by itself).
    torch._dynamo.reset()
    model = _mlp()
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=dynamic)
    with torch.no_grad():
        for n in (4, 8, 4, 16, 8, 16):  # each size's first call warms it up, its second captures it
            x = torch.randn(n, 64, device="flagos")
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        routed = _mm_calls()
        for n in (16, 8):
            x = torch.randn(n, 64, device="flagos")
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
            routed += 2  # the eager model's own two matmuls: the compiled call replays its size's capture
        assert _mm_calls() == routed


def test_reduce_overhead_first_call_writes_a_static_input_once():
    # A static cache's length counter, advanced in the graph: the capture's warm-up must not advance it too.
    torch._dynamo.reset()

    def step(count, x):
        count.add_(1)
        return x * count

    count = torch.zeros((), dtype=torch.int64, device="flagos")
    torch._dynamo.mark_static_address(count)
    compiled = torch.compile(step, mode="reduce-overhead")
    with torch.no_grad():
        for n in range(1, 5):
            out = compiled(count, torch.ones(4, device="flagos"))
            assert count.item() == n and out.cpu().tolist() == [float(n)] * 4


def test_reduce_overhead_training_runs_without_cuda_graphs_and_says_so():
    torch._dynamo.reset()
    batches = [torch.randn(8, 64, generator=torch.Generator().manual_seed(i)).to("flagos") for i in range(8)]

    def train(compile_mode):
        model = _mlp()
        step = model if compile_mode is None else torch.compile(model, mode=compile_mode)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for i in range(0, len(batches), 2):  # two micro-batches per step: grads accumulate across replays
            for x in batches[i : i + 2]:
                loss = step(x).pow(2).mean()
                loss.backward()
                losses.append(loss.item())
            opt.step()
            opt.zero_grad()
        return losses, [p.detach().clone() for p in model.parameters()]

    eager_losses, eager_params = train(None)
    with pytest.warns(UserWarning, match="part of a training step .* runs without CUDA graphs"):
        losses, params = train("reduce-overhead")
    torch.testing.assert_close(losses, eager_losses, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(params, eager_params, rtol=1e-4, atol=1e-5)


def test_reduce_overhead_dropout_draws_new_masks_each_replay():
    torch._dynamo.reset()
    model = _mlp(dropout=0.5).train()
    compiled = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(8, 64, device="flagos")
    with torch.no_grad():
        outs = [compiled(x) for _ in range(4)]
    assert not torch.equal(outs[2], outs[3])  # two replays


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@pytest.mark.parametrize("kv", [39, 40])
def test_sdpa_with_a_mask_the_graph_computes_runs_the_memory_efficient_kernel(mode, kv):
    # A decode step's mask, computed in the graph from the position (HF's static cache): inductor lays it out
    # densely, and rows of 39 are not what the memory-efficient kernel accepts ("attn_bias is not correctly aligned").
    torch._dynamo.reset()

    def fn(q, k, v, pos):
        keep = torch.arange(k.size(2), device=q.device) <= pos
        mask = torch.zeros((), dtype=q.dtype, device=q.device).masked_fill(~keep, float("-inf"))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None, None, :])

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 1, 16, generator=gen)
    k, v = (torch.randn(1, 4, kv, 16, generator=gen) for _ in range(2))
    compiled = torch.compile(fn, fullgraph=True, mode=mode)
    with torch.no_grad():
        for pos in (5, 20, kv - 1):
            want = fn(q.cuda(), k.cuda(), v.cuda(), torch.tensor(pos, device="cuda"))
            args = (q.to("flagos"), k.to("flagos"), v.to("flagos"), torch.tensor(pos, device="flagos"))
            if pos == 5 and mode is None:
                got, (code,) = run_and_get_code(compiled, *args)
                # Rows of 40 stay aligned in any layout: the kernel is called directly, not through the Python
                # operator that aligns the mask first (tens of microseconds a call)
                assert ("masked_efficient_attention" in code) == (kv % 8 != 0)
            else:
                got = compiled(*args)
            torch.testing.assert_close(got.cpu(), want.cpu(), rtol=1e-4, atol=1e-4)
