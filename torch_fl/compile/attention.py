"""scaled_dot_product_attention under torch.compile on flagos.

flagos's SDPA kernel (csrc/ops/sdpa.cpp) reads its inputs' memory: zero-copy aliases for the backing device's
own SDPA and for its fused-kernel choice. Tracing runs operators on fake tensors, which have no memory, so
while Dynamo compiles, SDPA on flagos is traced by the Python kernel below instead (registered for flagos's
autograd key with PyTorch's Python dispatcher, which is on only inside a compilation). It makes the kernel's
decision from metadata: the backing device's fused-kernel choice for the same shapes, asked of fake tensors
on that device, then the same fused operator the C++ kernel calls (CUDA: flash, memory-efficient or cuDNN
attention; CPU: its flash kernel; else the math composite). The compiled graph holds that operator as an
extern call, which runs on its flagos route like an eager call.
"""

from __future__ import annotations

import contextlib
import math

import torch

from torch_fl._core import DEVICE_NAME
from torch_fl.flagos._device import backing_device, on_cuda

_SDPA = torch.ops.aten.scaled_dot_product_attention.default
_CHOICE = torch.ops.aten._fused_sdp_choice.default


@contextlib.contextmanager
def tracing():
    """The Python dispatcher on (so that the Python SDPA kernel below traces flagos SDPA) inside the block."""
    from torch._dispatch.python import enable_python_dispatcher

    with enable_python_dispatcher():
        yield


def install_compile_window(handler) -> None:
    """Wrap Dynamo's per-compilation context (its callback handler's install_callbacks) with tracing()."""
    inner = handler.install_callbacks
    if getattr(inner, "_flagos", False):
        return

    @contextlib.contextmanager
    def install_callbacks(*args, **kwargs):
        with tracing(), inner(*args, **kwargs):
            yield

    install_callbacks._flagos = True
    # An instance attribute: torch._dynamo.reset() clears the registered callbacks, not this.
    handler.install_callbacks = install_callbacks


def _twin(t):
    """A tensor on the backing device with t's metadata (fake under fake mode: no memory)."""
    if not isinstance(t, torch.Tensor) or t.device.type != DEVICE_NAME:
        return t
    twin = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=backing_device(t.device))
    # The choice depends on which inputs need gradients (flagos's choice function passes that on too).
    return twin.requires_grad_(t.requires_grad) if t.is_floating_point() else twin


def _choice(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa) -> int:
    """The backing device's fused-kernel choice (an SDPBackend value) for these inputs' metadata: its own
    kernel of `_fused_sdp_choice`, called on tensors of that device with the same metadata."""
    with torch.no_grad():
        twins = [_twin(t) for t in (q, k, v, mask)]
    key = torch._C.DispatchKey.CUDA if on_cuda() else torch._C.DispatchKey.CPU
    return _CHOICE.redispatch(
        torch._C.DispatchKeySet(key), *twins, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
    )


def _additive(mask, dtype, masked_value):
    """A boolean mask as an additive one, in the operators and order of PyTorch's own SDPA (its
    convert_boolean_attn_mask): inductor then fuses and names the kernels as in the same graph on cuda."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.where(mask, 0.0, torch.scalar_tensor(masked_value, dtype=dtype, device=mask.device))


@torch.library.custom_op("torch_fl::aligned_attention_mask", mutates_args=())
def aligned_attention_mask(mask: torch.Tensor, sizes: list[int], broadcast: bool) -> torch.Tensor:
    """`mask.expand(sizes)` as the memory-efficient kernel takes it: rows padded to a multiple of 8 elements, in
    memory of its own; `broadcast`: batch and head dimensions of one element stay so (stride 0), as PyTorch's
    own SDPA expands its mask. An operator of its own, not the pad, slice and expand it runs: inductor keeps an
    operator's output strides, but lays out a slice or an expand it computes as it likes (densely: rows of 39),
    and its own alignment rule for SDPA's inputs (lowering.sdpa_constraint) applies to 'cuda' tensors only."""
    return _padded_rows(mask, sizes, broadcast)


def _padded_rows(mask, sizes, broadcast):
    last = sizes[-1]
    held = [1 if broadcast and i < 2 and mask.size(i) == 1 else sizes[i] for i in range(3)]
    rows = mask.new_empty((*held, last + -last % 8))[..., :last]
    return rows.copy_(mask.expand(*held, last)).expand(sizes)


def _mask_grad(ctx, grad):
    return grad.sum_to_size(ctx.shape), None, None


def _keep_shape(ctx, inputs, output):
    ctx.shape = inputs[0].shape


aligned_attention_mask.register_fake(_padded_rows)
# A learned additive bias (T5's position bias) takes the gradient of the mask it was read as.
aligned_attention_mask.register_autograd(_mask_grad, setup_context=_keep_shape)


def _aligned(mask, q, k):
    """The mask as the memory-efficient kernel takes it: 4-D of the attention's sizes (the kernel checks them;
    broadcast dimensions of stride 0), rows of a multiple of 8 elements apart (csrc/ops/sdpa.cpp). Inductor lays
    out a mask the graph computes as it likes: one whose rows are not a multiple of 8 long, or whose batch or head
    dimension was expanded in the graph, is written out by aligned_attention_mask. A mask that takes a gradient is
    written out over every batch and head (the kernel writes its gradient per batch and head)."""
    mask, sizes = _held(mask, q, k)
    if _kernel_ready(mask, sizes):
        return mask.expand(sizes)
    return aligned_attention_mask(mask, sizes, not mask.requires_grad)


def _held(mask, q, k):
    """The mask 4-D, an expanded (stride 0) batch or head dimension back to one where it takes no gradient (batch
    and heads stay broadcast), and the attention's sizes."""
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    if not mask.requires_grad:
        mask = mask[tuple(slice(0, 1) if mask.stride(i) == 0 else slice(None) for i in range(2))]
    return mask, [q.size(0), q.size(1), q.size(2), k.size(2)]


def _kernel_ready(mask, sizes) -> bool:
    """Whether the kernel takes `mask` (from _held) as it is laid out, and would in any dense layout inductor gives
    it: a key length that is a multiple of 8 (an int: a symbolic one is not decided here, which would add a guard),
    rows of a multiple of 8 elements apart."""
    held = [mask.size(0), mask.size(1)] if not mask.requires_grad else sizes[:2]
    return (
        isinstance(sizes[3], int)
        and sizes[3] % 8 == 0
        and list(mask.shape) == [*held, *sizes[2:]]
        and mask.stride(-1) == 1
        and all(mask.stride(i) % 8 == 0 and mask.stride(i) != 0 for i in range(3))
    )


def _masked_efficient_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, is_causal: bool, scale: float | None
) -> torch.Tensor:
    """The memory-efficient kernel's output for an attention without a gradient, its mask aligned inside: an
    operator of its own, so that inductor, which may lay out any tensor passed between two operators of a flagos
    graph densely again (its SDPA stride rule keeps the mask's alignment for 'cuda' tensors only: rows of 39 are
    what the kernel refuses), sees no mask to lay out. Broadcast batch and head dimensions stay so (stride 0)."""
    sizes = [q.size(0), q.size(1), q.size(2), k.size(2)]
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    mask = _padded_rows(mask, sizes, True)
    return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, mask, False, 0.0, is_causal, scale=scale)[0]


masked_efficient_attention = torch.library.custom_op("torch_fl::masked_efficient_attention", mutates_args=())(
    _masked_efficient_attention
)
masked_efficient_attention.register_fake(_masked_efficient_attention)


def _needs_lse(q, k, v) -> bool:
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


def _pad8(t):
    last = t.size(-1)
    return t if last % 8 == 0 else torch.nn.functional.pad(t, (0, 8 - last % 8))


def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    """flagos SDPA from metadata alone (what csrc/ops/sdpa.cpp decides, on flagos tensors)."""
    aten = torch.ops.aten
    if not on_cuda():  # PyTorch's composite makes a boolean mask additive first, for the choice and every kernel
        attn_mask = _additive(attn_mask, q.dtype, -math.inf)
    backend = _choice(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if on_cuda() and backend == 3:  # cuDNN: mishandles -inf in masks; PyTorch uses the fp16 minimum too
        mask = _additive(attn_mask, q.dtype, -65504.0)
        return aten._scaled_dot_product_cudnn_attention(
            q, k, v, mask, _needs_lse(q, k, v), dropout_p, is_causal, False, scale=scale
        )[0]
    if on_cuda() and backend == 1:  # flash: head size padded to a multiple of 8, the scale of the unpadded one
        head = q.size(-1)
        og_scale = scale if scale is not None else 1.0 / math.sqrt(head)
        out = aten._scaled_dot_product_flash_attention(
            _pad8(q), _pad8(k), _pad8(v), dropout_p, is_causal, False, scale=og_scale
        )[0]
        return out[..., :head]
    if on_cuda() and backend == 2:  # memory-efficient
        mask = _additive(attn_mask, q.dtype, -math.inf)
        if mask is not None and not mask.requires_grad and not _needs_lse(q, k, v) and dropout_p == 0:
            # The kernel as an extern call where the mask keeps its alignment in any layout; else the operator
            # that aligns inside (a Python operator: tens of microseconds a call more)
            if not _kernel_ready(*_held(mask, q, k)):
                return masked_efficient_attention(q, k, v, mask, is_causal, scale)
        if mask is not None:
            mask = _aligned(mask, q, k)
        return aten._scaled_dot_product_efficient_attention(
            q, k, v, mask, _needs_lse(q, k, v), dropout_p, is_causal, scale=scale
        )[0]
    if not on_cuda() and backend == 1:  # the CPU flash kernel, as PyTorch's composite calls it
        return aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
        )[0]
    return aten._scaled_dot_product_attention_math(
        q, k, v, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa
    )[0]


def _on_flagos(*tensors) -> bool:
    return any(isinstance(t, torch.Tensor) and t.device.type == DEVICE_NAME for t in tensors)


def _traced_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    if not _on_flagos(q, k, v) or not _is_fake(q):
        # Real tensors (an eager call while a compilation runs): flagos's own kernel.
        with torch._C._DisablePythonDispatcher():
            return _SDPA(q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    return _sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)


def _is_fake(t) -> bool:
    from torch._subclasses.fake_tensor import is_fake

    return is_fake(t)


def install_traced_sdpa() -> None:
    """Register the Python SDPA kernel for flagos's autograd key (used only under the Python dispatcher)."""
    key = torch._C.DispatchKey.AutogradPrivateUse1
    if key in _SDPA.py_kernels:
        return
    _SDPA.py_impl(key)(_traced_sdpa)
