"""nn.LSTM, nn.GRU and packed sequences on flagos, as on CUDA.

On an accelerator PyTorch runs each LSTM and GRU step through the fused cells
_thnn_fused_lstm_cell and _thnn_fused_gru_cell, which the CPU lacks: the host
backing composes them (csrc/route/host_rnn.cpp), a CUDA backing runs CUDA's.
Results are compared with the same module on the CPU. A packed sequence keeps
batch_sizes on the CPU, as PackedSequence requires and CUDA does.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pack_sequence, pad_packed_sequence

import torch_fl  # noqa: F401

pytestmark = pytest.mark.anyplatform


def _pair(module: torch.nn.Module, dtype=torch.float32):
    cpu = module.to(dtype)
    return cpu, copy.deepcopy(cpu).to("flagos")


def _close(flagos: torch.Tensor, cpu: torch.Tensor, dtype=torch.float32) -> None:
    assert flagos.device.type == "flagos"
    torch.testing.assert_close(flagos.cpu(), cpu, **({} if dtype != torch.float32 else {"rtol": 1e-5, "atol": 1e-5}))


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
@pytest.mark.parametrize("bias", [True, False])
def test_recurrent_modules_train_as_on_the_cpu(cls, bias):
    torch.manual_seed(0)
    cpu, fl = _pair(cls(4, 6, num_layers=2, bias=bias, batch_first=True, bidirectional=True))
    x = torch.randn(3, 5, 4, requires_grad=True)
    xf = x.detach().to("flagos").requires_grad_()
    out, state = cpu(x)
    out_f, state_f = fl(xf)
    _close(out_f, out)
    for s, s_f in zip(
        state if isinstance(state, tuple) else (state,),
        state_f if isinstance(state_f, tuple) else (state_f,),
        strict=True,
    ):
        _close(s_f, s)
    (out.sum() + out.pow(2).mean()).backward()
    (out_f.sum() + out_f.pow(2).mean()).backward()
    _close(xf.grad, x.grad)
    for (name, p), p_f in zip(cpu.named_parameters(), fl.parameters(), strict=True):
        assert p_f.grad is not None, name
        _close(p_f.grad, p.grad)


@pytest.mark.parametrize("cls", [torch.nn.LSTMCell, torch.nn.GRUCell])
def test_cells_with_and_without_a_state(cls):
    torch.manual_seed(1)
    cpu, fl = _pair(cls(5, 7))
    x = torch.randn(4, 5)
    _close(
        fl(x.to("flagos"))[0] if cls is torch.nn.LSTMCell else fl(x.to("flagos")),
        cpu(x)[0] if cls is torch.nn.LSTMCell else cpu(x),
    )
    state = (torch.randn(4, 7), torch.randn(4, 7)) if cls is torch.nn.LSTMCell else torch.randn(4, 7)
    state_f = tuple(s.to("flagos") for s in state) if isinstance(state, tuple) else state.to("flagos")
    got, want = fl(x.to("flagos"), state_f), cpu(x, state)
    for g, w in zip(
        got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,), strict=True
    ):
        _close(g, w)


def test_the_fused_cells_have_the_gradients_of_their_formulas():
    torch.manual_seed(2)
    opts = {"device": "flagos", "dtype": torch.float64, "requires_grad": True}
    batch, hidden = 3, 2
    for gates, op in ((4, torch.ops.aten._thnn_fused_lstm_cell), (3, torch.ops.aten._thnn_fused_gru_cell)):
        ig, hg = torch.randn(batch, gates * hidden, **opts), torch.randn(batch, gates * hidden, **opts)
        state = torch.randn(batch, hidden, **opts)
        b1, b2 = torch.randn(gates * hidden, **opts), torch.randn(gates * hidden, **opts)
        keep = 2 if gates == 4 else 1  # (hy, cy) for LSTM, hy for GRU: the workspace is the backward's
        assert torch.autograd.gradcheck(lambda *a: op(*a)[:keep], (ig, hg, state, b1, b2))  # noqa: B023
        assert torch.autograd.gradcheck(lambda *a: op(*a)[:keep], (ig, hg, state))  # noqa: B023


def test_a_half_precision_cell_computes_its_gates_in_float():
    torch.manual_seed(3)
    cpu = torch.nn.LSTMCell(8, 16)
    fl = copy.deepcopy(cpu).to("flagos", torch.bfloat16)
    x = torch.randn(2, 8)
    hy, cy = fl(x.to("flagos", torch.bfloat16))
    assert hy.dtype == cy.dtype == torch.bfloat16
    want_h, want_c = cpu(x.to(torch.bfloat16).float())
    torch.testing.assert_close(hy.float().cpu(), want_h, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(cy.float().cpu(), want_c, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_packed_sequences_keep_batch_sizes_on_the_cpu(enforce_sorted):
    torch.manual_seed(4)
    cpu, fl = _pair(torch.nn.LSTM(4, 6, batch_first=True))
    x = torch.randn(3, 5, 4)
    lengths = torch.tensor([5, 3, 2]) if enforce_sorted else torch.tensor([2, 5, 3])
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=enforce_sorted)
    packed_f = pack_padded_sequence(x.to("flagos"), lengths, batch_first=True, enforce_sorted=enforce_sorted)
    assert packed_f.data.device.type == "flagos" and packed_f.batch_sizes.device.type == "cpu"
    assert torch.equal(packed_f.batch_sizes, packed.batch_sizes)
    out, _ = cpu(packed)
    out_f, _ = fl(packed_f)
    padded, lens = pad_packed_sequence(out, batch_first=True)
    padded_f, lens_f = pad_packed_sequence(out_f, batch_first=True)
    _close(padded_f, padded)
    assert lens_f.device.type == "cpu" and torch.equal(lens_f, lens)
    padded_f.sum().backward()
    assert all(p.grad is not None for p in fl.parameters())
    seqs = pack_sequence([torch.ones(3, 2, device="flagos"), torch.ones(1, 2, device="flagos")])
    assert seqs.batch_sizes.device.type == "cpu" and seqs.batch_sizes.tolist() == [2, 1, 1]
