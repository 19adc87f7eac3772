// Operators that run on flagos itself because they create, view or re-point
// storage (empty, view, as_strided, set_, resize_, _copy_from, ...).
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_fl {
namespace ops {

// Registers them at PrivateUse1 (each a core operator, ops/core_ops.h), and
// lets _copy_from pass through the Conjugate and Negative keys.
void register_metadata_ops();

// aten::empty_strided on flagos:index (-1: the current device) without the dispatcher: the allocation
// function of inductor's flagos wrappers (python/module.cpp). Never filled under deterministic algorithms, as
// inductor's CUDA buffers (at::detail::empty_strided_cuda) are not.
at::Tensor empty_strided_on(at::IntArrayRef size, at::IntArrayRef stride, at::ScalarType dtype,
                            c10::DeviceIndex index);

}  // namespace ops
}  // namespace torch_fl
