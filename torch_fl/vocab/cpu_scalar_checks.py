"""The arguments CUDA's kernels refuse a 0-dim CPU tensor in, beside those of the operators native_functions.yaml
marks as checking every device (device_checks.py).

Measured on an H100 (torch 2.11, CUDA 13) with PyTorch's OpInfo samples, each tensor argument in turn a 0-dim CPU
tensor beside an input on the GPU: the operators that ran none of those calls, with the arguments the samples put
a CPU scalar in; for logical_and/or/xor, masked_fill.Tensor, index_fill.int_Tensor and soft_margin_loss, which
ran some, the arguments CUDA's error names or whose count of refused calls matches; OUT_NEEDS_A_DEVICE_INPUT: the
out= overloads beside the structured TensorIterator ones that the same probe saw refuse every call whose tensor
inputs were all CPU scalars. On a GPU,

    python -m torch_fl.conformance.cpu_scalars --write torch_fl/vocab/cpu_scalar_checks.py

measures it per argument and writes this module again.
"""

REFUSED = {
    "_unsafe_masked_index": ("mask",),
    "_unsafe_masked_index_put_accumulate": ("mask", "values"),
    "addcdiv": ("self", "tensor1", "tensor2"),
    "addcdiv.out": ("self", "tensor1", "tensor2"),
    "binary_cross_entropy": ("self", "target"),
    "block_diag": ("tensors",),
    "clamp.Tensor_out": ("max", "min", "self"),
    "complex": ("imag", "real"),
    "embedding": ("indices",),
    "index_fill.int_Scalar": ("index", "self"),
    "index_fill.int_Tensor": ("index", "self"),
    "lerp.Scalar": ("end", "self"),
    "lerp.Scalar_out": ("end", "self"),
    "logical_and": ("self",),
    "logical_or": ("self",),
    "logical_xor": ("self",),
    "masked_fill.Scalar": ("mask", "self"),
    "masked_fill.Tensor": ("mask", "self"),
    "masked_scatter": ("mask", "self", "source"),
    "mse_loss": ("self", "target"),
    "polar": ("abs", "angle"),
    "smooth_l1_loss": ("self", "target"),
    "soft_margin_loss": ("self",),
}

OUT_NEEDS_A_DEVICE_INPUT = (
    "abs.out",
    "angle.out",
    "logical_not.out",
    "std.correction_out",
)
