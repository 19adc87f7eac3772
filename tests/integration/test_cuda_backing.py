"""flagos backed by CUDA: one memory pool, CUDA streams, fused SDPA, CUDA RNG,
and the documented limitation on native CUDA backward in the same process."""

from __future__ import annotations

import gc

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_fl
from tests.helpers import run_python

pytestmark = pytest.mark.cuda


def test_flagos_i_is_cuda_i():
    for i in range(torch.flagos.device_count()):
        x = torch.ones(4, device=f"flagos:{i}")
        n = torch_fl.as_native(x)
        assert n.device == torch.device("cuda", i) and n.data_ptr() == x.data_ptr()
    assert torch.flagos.device_count() == torch.cuda.device_count()


def test_one_memory_pool_with_cuda():
    # Garbage of earlier tests in this process must not be freed in between
    # (the H200 run saw 2560 bytes go during the test).
    gc.collect()
    gc.disable()
    try:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated(0)
        x = torch.empty(64 << 20, dtype=torch.uint8, device="flagos:0")
        assert torch.cuda.memory_allocated(0) >= before + (64 << 20)
        assert torch.flagos.memory_allocated(0) == torch.cuda.memory_allocated(0)
        assert torch.flagos.memory_stats(0).keys() == torch.cuda.memory_stats(0).keys()
        del x
        assert torch.cuda.memory_allocated(0) == before
    finally:
        gc.enable()


def test_flagos_streams_are_cuda_streams():
    s = torch.flagos.Stream()
    with torch.flagos.stream(s):
        assert torch.cuda.current_stream().stream_id == s.stream_id
        a = torch.randn(1024, 1024, device="flagos")
        start, end = torch.flagos.Event(enable_timing=True), torch.flagos.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            a = a @ a / 1024
        end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0
    assert torch.cuda.current_stream().stream_id == torch.flagos.current_stream().stream_id


def sdpa_inputs(requires_grad: bool):
    g = torch.Generator().manual_seed(0)
    shape = (2, 8, 256, 128)
    qkv = [torch.randn(shape, generator=g, dtype=torch.bfloat16) for _ in range(3)]
    native = [t.cuda().requires_grad_(requires_grad) for t in qkv]
    flagos = [t.to("flagos").requires_grad_(requires_grad) for t in qkv]
    return native, flagos


def fused_ops_run() -> set[str]:
    return {op for op, _backend, _calls in torch_fl._C._route_stats() if "scaled_dot_product" in op}


def test_sdpa_takes_the_fused_kernels_forward_and_backward():
    native, flagos = sdpa_inputs(requires_grad=True)
    torch_fl._C._reset_route_stats()
    out = F.scaled_dot_product_attention(*flagos, is_causal=True)
    out.float().square().sum().backward()
    ran = fused_ops_run()
    assert any(
        op.startswith(("_scaled_dot_product_flash", "_scaled_dot_product_cudnn", "_scaled_dot_product_eff"))
        for op in ran
    ), ran
    assert not any("math" in op for op in ran), ran
    with torch.no_grad():
        ref = F.scaled_dot_product_attention(*native, is_causal=True)
    torch.testing.assert_close(out.detach().cpu(), ref.cpu(), rtol=0, atol=0)
    assert all(t.grad is not None and t.grad.device.type == "flagos" for t in flagos)


@pytest.mark.parametrize("mode", [torch.inference_mode, torch.no_grad])
def test_sdpa_without_gradients_is_cudas_own_sdpa_fused_and_exact(mode):
    # One routed call: CUDA's scaled_dot_product_attention on the aliases,
    # which picks and runs a fused kernel (seen by the profiler, not routed).
    native, flagos = sdpa_inputs(requires_grad=False)
    torch_fl._C._reset_route_stats()
    with mode(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = F.scaled_dot_product_attention(*flagos, is_causal=True)
    assert fused_ops_run() == {"scaled_dot_product_attention"}
    events = {e.name for e in prof.events()}
    assert any(n.startswith(("aten::_scaled_dot_product_flash", "aten::_scaled_dot_product_cudnn")) for n in events)
    assert not any("math" in n for n in events), events
    with mode():
        ref = F.scaled_dot_product_attention(*native, is_causal=True)
    torch.testing.assert_close(out.cpu(), ref.cpu(), rtol=0, atol=0)


def test_rng_equals_cuda():
    torch.manual_seed(42)
    a = torch.randn(1000, device="flagos").cpu()
    torch.manual_seed(42)
    b = torch.randn(1000, device="cuda").cpu()
    assert torch.equal(a, b)
    torch.manual_seed(1)
    m1 = nn.Linear(64, 64, device="flagos")
    torch.manual_seed(1)
    m2 = nn.Linear(64, 64, device="cuda")
    assert torch.equal(m1.weight.cpu(), m2.weight.cpu())


def test_pinned_memory_is_cuda_pinned_memory():
    host = torch.randn(1 << 16).pin_memory()
    assert host.is_pinned()
    dev = host.to("flagos", non_blocking=True)
    out = torch.empty_like(host).pin_memory()
    out.copy_(dev, non_blocking=True)
    torch.flagos.synchronize()
    assert torch.equal(out, host)


def test_native_cuda_forward_and_inference_work_beside_flagos():
    m = nn.Linear(32, 8).cuda()
    x = torch.randn(4, 32, device="cuda")
    with torch.no_grad():
        y = m(x)
    assert y.device.type == "cuda"
    torch.testing.assert_close(y.cpu(), m.cpu()(x.cpu()), rtol=1e-3, atol=1e-3)


def test_native_cuda_backward_in_the_same_process_is_the_documented_limitation():
    # README "Limitations": PyTorch makes the renamed PrivateUse1 backend the
    # accelerator, and its autograd engine then asserts on CUDA-only graphs;
    # torch_fl raises that one failure with its cause and fix (torch_fl/native_backward.py).
    m = nn.Linear(32, 8).cuda()
    loss = m(torch.randn(4, 32, device="cuda")).sum()
    with pytest.raises(RuntimeError, match="PyTorch issue 161129") as raised:
        loss.backward()
    assert "torch_fl.integrations.enable()" in str(raised.value)
    assert "opt_ready_stream && opt_parent_stream" in str(raised.value.__cause__)


def test_native_cuda_backward_works_in_a_process_without_torch_fl():
    proc = run_python(
        """
        import torch
        m = torch.nn.Linear(32, 8).cuda()
        m(torch.randn(4, 32, device="cuda")).sum().backward()
        print(m.weight.grad.shape)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "torch.Size([8, 32])"


def test_autocast_matches_cuda_autocast():
    a = torch.randn(16, 16)
    fa, ca = a.to("flagos"), a.cuda()
    ops = {
        "mm": lambda t: t @ t,
        "log_softmax": lambda t: torch.log_softmax(t, -1),
        "sum": lambda t: t.sum(),
        "layer_norm": lambda t: F.layer_norm(t, (16,)),
    }
    for name, fn in ops.items():
        with torch.autocast("flagos", dtype=torch.bfloat16):
            got = fn(fa).dtype
        with torch.autocast("cuda", dtype=torch.bfloat16):
            want = fn(ca).dtype
        assert got == want, name
