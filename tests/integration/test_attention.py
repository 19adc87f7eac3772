"""scaled_dot_product_attention on flagos: one native call without gradients, the decomposition with them.

Without a gradient to record, flagos runs the backing device's own SDPA on
zero-copy aliases as one routed call (same kernel choice, padding and mask
handling as native); with one, it decomposes into flagos operators that
autograd records. A route on any attention operator turns the shortcut off,
so that route is reached. Host backing here; the CUDA backing's kernel choice
is tested in test_cuda_backing.py. Results are compared with the backing
device's own SDPA (CPU here, CUDA on a GPU): exactly without gradients, where
the same kernel runs.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_fl
from tests.unit.routing_fixtures import routing_state  # noqa: F401  (a fixture)
from torch_fl import routing

pytestmark = pytest.mark.anyplatform

SDPA = "scaled_dot_product_attention"
NATIVE = torch_fl.backing()  # "cpu" or "cuda": the device flagos memory is, and its dispatch-log label


def qkv(requires_grad: bool = False):
    g = torch.Generator().manual_seed(0)
    host = [torch.randn(2, 4, 16, 32, generator=g) for _ in range(3)]
    native = [t.to(NATIVE) for t in host]
    flagos = [t.to("flagos").requires_grad_(requires_grad) for t in host]
    return native, flagos


def ran() -> dict[tuple[str, str], int]:
    return {(s.op, s.backend): s.calls for s in routing.stats() if s.calls}


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "inputs_without_grad"])
@pytest.mark.parametrize("masking", ["causal", "bool_mask", "float_mask"])
def test_without_gradients_sdpa_is_one_native_call_equal_to_native(mode, masking):
    native, flagos = qkv()
    kwargs_native, kwargs_flagos = {}, {}
    if masking == "causal":
        kwargs_native = kwargs_flagos = {"is_causal": True}
    else:
        mask = torch.rand(16, 16, generator=torch.Generator().manual_seed(1)) > 0.3
        mask.fill_diagonal_(True)
        if masking == "float_mask":
            mask = torch.zeros(16, 16).masked_fill(~mask, float("-inf"))
        kwargs_native, kwargs_flagos = {"attn_mask": mask.to(NATIVE)}, {"attn_mask": mask.to("flagos")}
    context = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}.get(mode, torch.enable_grad)
    routing.reset_stats()
    with context():
        out = F.scaled_dot_product_attention(*flagos, **kwargs_flagos)
    assert ran() == {(SDPA, "native"): 1}
    assert out.device.type == "flagos" and not out.requires_grad
    with context():
        ref = F.scaled_dot_product_attention(*native, **kwargs_native)
    torch.testing.assert_close(out.cpu(), ref.cpu(), rtol=0, atol=0)


def test_the_shortcut_is_logged_as_one_dispatch_line(routing_state, capfd):  # noqa: F811
    _, flagos = qkv()
    routing.set_log_dispatch(True)
    capfd.readouterr()
    with torch.no_grad():
        F.scaled_dot_product_attention(*flagos, is_causal=True)
    assert capfd.readouterr().err.splitlines() == [f"[flagos dispatch] {SDPA} -> {NATIVE}"]


def test_with_gradients_sdpa_decomposes_into_recorded_flagos_operators():
    _, flagos = qkv(requires_grad=True)
    routing.reset_stats()
    out = F.scaled_dot_product_attention(*flagos, is_causal=True)
    out.square().sum().backward()
    calls = ran()
    assert (SDPA, "native") not in calls
    assert any(op.startswith("_scaled_dot_product") and "backward" in op for op, _ in calls), calls
    # The reference runs on the host in float64: native CUDA backward cannot
    # run in this process (README, Limitations).
    ref_in = [t.detach().cpu().double().requires_grad_() for t in flagos]
    F.scaled_dot_product_attention(*ref_in, is_causal=True).square().sum().backward()
    for f, r in zip(flagos, ref_in, strict=True):
        assert f.grad.device.type == "flagos"
        torch.testing.assert_close(f.grad.cpu(), r.grad.float(), rtol=1e-4, atol=1e-4)


def test_a_route_on_an_attention_operator_turns_the_shortcut_off(routing_state):  # noqa: F811
    native, flagos = qkv()
    # The host's fused kernel, routed to the CPU fallback: on host backing the
    # decomposition reaches that route; on CUDA it is never chosen, and the
    # shortcut is off all the same.
    fused = "_scaled_dot_product_flash_attention_for_cpu"
    with routing.route({fused: "cpu_fallback"}):
        assert torch_fl._C._attention_routed()
        routing.reset_stats()
        with torch.no_grad():
            out = F.scaled_dot_product_attention(*flagos, is_causal=True)
        assert (SDPA, "native") not in ran()
        if NATIVE == "cpu":
            assert ran().get((fused, "cpu_fallback")) == 1
    with torch.no_grad():
        ref = F.scaled_dot_product_attention(*native, is_causal=True)
    torch.testing.assert_close(out.cpu(), ref.cpu())
    assert not torch_fl._C._attention_routed()
    routing.reset_stats()
    with torch.no_grad():
        F.scaled_dot_product_attention(*flagos, is_causal=True)
    assert ran() == {(SDPA, "native"): 1}


@pytest.mark.parametrize("dual", ["query", "mask"])
def test_forward_mode_ad_is_not_dropped_by_the_shortcut(dual):
    # A dual tensor (forward-mode AD) needs the decomposition even without
    # gradients: flagos must then do what native does (a tangent, or the same
    # error), never return a result without its tangent.
    import torch.autograd.forward_ad as fwAD

    def run(device):
        q, k, v = (t.to(device) for t in qkv()[0])
        mask = torch.zeros(16, 16, device=device)
        tangent = torch.ones_like(q if dual == "query" else mask)
        with torch.no_grad(), fwAD.dual_level():
            if dual == "query":
                q = fwAD.make_dual(q, tangent)
            else:
                mask = fwAD.make_dual(mask, tangent)
            try:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            except RuntimeError as e:
                return "error", str(e).splitlines()[0]
            tan = fwAD.unpack_dual(out).tangent
            return "tangent", None if tan is None else tan.cpu()

    native, flagos = run(NATIVE), run("flagos")
    assert flagos[0] == native[0], (native, flagos)
    if native[0] == "error":
        assert flagos[1] == native[1]
    else:
        assert flagos[1] is not None
        torch.testing.assert_close(flagos[1], native[1], rtol=1e-4, atol=1e-5)
