"""Every module in PyTorch's ModuleInfo database (module_db) runs on flagos as it runs on the CPU.

OpInfo conformance checks operators one by one; a module reaches operators a
model needs that no OpInfo sample calls (nn.LSTM on host backing reached the
fused RNN cells, which the CPU lacks). For each module, float32, in training
and in eval mode, every sample input of its ModuleInfo: the module built on
the CPU and a copy on flagos get the same inputs; their outputs, the
gradients of their inputs and parameters, and their buffers afterwards (the
running statistics of the norms) must agree. The CPU is the reference on
either backing: on CUDA this also checks CUDA's kernels against the CPU's,
within float32 tolerance.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch.testing._internal.common_modules import module_db
from torch.utils._pytree import tree_flatten, tree_map

import torch_fl
from torch_fl.conformance.runner import full_precision_on_cuda

pytestmark = [pytest.mark.anyplatform, pytest.mark.filterwarnings("ignore::UserWarning")]

DTYPE = torch.float32


def _to_flagos(x):
    if not isinstance(x, torch.Tensor):
        return x
    y = x.detach().to("flagos")
    return y.requires_grad_(x.requires_grad) if x.is_floating_point() or x.is_complex() else y


def _leaves(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _run(module, args, kwargs):
    out = module(*args, **kwargs)
    outs = [t for t in _leaves(out) if t.requires_grad]
    if outs:
        sum(t.float().sum() for t in outs).backward()
    return out


def _cases():
    for info in module_db:
        if DTYPE in info.dtypes:
            for training in (True, False):
                yield pytest.param(info, training, id=f"{info.name}-{'train' if training else 'eval'}")


# Host backing runs the CPU's own kernels (composed ones, such as the RNN cells, sum in another order); CUDA's
# kernels reduce in other orders again, over the larger sums of a backward.
TOLERANCE = {"cpu": {"rtol": 1e-4, "atol": 1e-5}}.get(torch_fl.backing(), {"rtol": 1e-3, "atol": 1e-4})


def _close(actual, expected, what):
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    assert actual.device.type == "flagos", f"{what} is on {actual.device}, not flagos"
    torch.testing.assert_close(actual.cpu(), expected, **TOLERANCE, equal_nan=True, msg=lambda m: f"{what}: {m}")


@pytest.fixture(autouse=True, scope="module")
def full_float32():
    """On a CUDA backing, float32 convolutions and matmuls without TF32 (for the rest of the process, as the
    OpInfo sweep does): the CPU computes them in full float32."""
    full_precision_on_cuda()


@pytest.mark.parametrize("info, training", list(_cases()))
def test_module_matches_the_cpu(info, training):
    samples = info.module_inputs_func(info, device="cpu", dtype=DTYPE, requires_grad=True, training=training)
    assert samples, f"{info.name} has no sample inputs"
    for i, sample in enumerate(samples):
        if sample.forward_input is None:
            continue
        what = f"{info.name} ({'train' if training else 'eval'}) sample {i} {sample.desc!r}"
        ctor, fwd = sample.constructor_input, sample.forward_input
        torch.manual_seed(0)
        cpu = info.module_cls(*ctor.args, **ctor.kwargs).to(DTYPE).train(training)
        on_flagos = None if info.is_lazy else copy.deepcopy(cpu).to("flagos")
        args, kwargs = fwd.args, fwd.kwargs
        flagos_args, flagos_kwargs = tree_map(_to_flagos, args), tree_map(_to_flagos, kwargs)
        expected = _run(cpu, args, kwargs)
        if on_flagos is None:  # a lazy module has its parameters after its first forward
            on_flagos = copy.deepcopy(cpu).to("flagos")
            for p in on_flagos.parameters():
                p.grad = None
        actual = _run(on_flagos, flagos_args, flagos_kwargs)

        got, want = _leaves(actual), _leaves(expected)
        assert len(got) == len(want), what
        for j, (a, e) in enumerate(zip(got, want, strict=True)):
            _close(a, e, f"{what} output {j}")
        for j, (a, e) in enumerate(zip(_leaves((flagos_args, flagos_kwargs)), _leaves((args, kwargs)), strict=True)):
            if e.grad is not None:
                assert a.grad is not None, f"{what}: input {j} has a gradient on the CPU, none on flagos"
                _close(a.grad, e.grad, f"{what} input {j} gradient")
        for (name, a), (_, e) in zip(on_flagos.named_parameters(), cpu.named_parameters(), strict=True):
            if e.grad is not None:
                assert a.grad is not None, f"{what}: {name} has a gradient on the CPU, none on flagos"
                _close(a.grad, e.grad, f"{what} {name} gradient")
        for (name, a), (_, e) in zip(on_flagos.named_buffers(), cpu.named_buffers(), strict=True):
            _close(a, e, f"{what} buffer {name}")
