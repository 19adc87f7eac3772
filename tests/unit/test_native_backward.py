"""The engine's assert on native CUDA backward beside flagos (PyTorch issue 161129) raised with its cause
and fix (torch_fl/native_backward.py). The assert itself needs a GPU (tests/integration/test_cuda_backing.py);
here a backward that fails with the engine's words goes through the same wrapper."""

import pytest
import torch

from tests.helpers import run_python

CODE = """
    import torch, torch_fl
    from torch_fl import native_backward

    native_backward.install()
    native_backward.install()  # once only
    assert torch.autograd._engine_run_backward is torch.autograd.graph._engine_run_backward

    class Fails(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            raise RuntimeError(MESSAGE)

    x = torch.ones(2, requires_grad=True)
    try:
        Fails.apply(x).sum().backward()
    except RuntimeError as e:
        print(type(e.__cause__).__name__ if e.__cause__ else "-", "|", str(e).splitlines()[0])
    y = (x * 3).sum()
    (grad,) = torch.autograd.grad(y, x)
    print(grad.tolist())
"""


@pytest.mark.parametrize(
    "engine_error, shown",
    [
        (
            "opt_ready_stream && opt_parent_stream INTERNAL ASSERT FAILED at input_buffer.cpp",
            "RuntimeError | backward over CUDA tensors cannot run in a process that",
        ),
        ("some other failure", "- | some other failure"),
    ],
)
def test_the_engine_assert_is_raised_with_cause_and_fix(engine_error, shown):
    done = run_python(f"MESSAGE = {engine_error!r}\n" + CODE.replace("\n    ", "\n"))
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = done.stdout.strip().splitlines()
    assert first.startswith(shown)
    assert second == "[3.0, 3.0]"  # other backward passes are untouched


def test_installed_only_on_a_cuda_backing():
    import torch_fl

    wrapped = getattr(torch.autograd.graph._engine_run_backward, "_flagos_explained", False)
    assert wrapped == (torch_fl.backing() == "cuda")
