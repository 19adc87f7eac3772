// Nested tensors of the strided layout on flagos: refused where they are made
// and where one is used (ops/nested.cpp); registered by ops/register.cpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/ArrayRef.h>

#include <optional>

namespace torch_fl {
namespace ops {

// BackendSelect kernel of _nested_tensor_from_tensor_list: refuses one made on flagos.
at::Tensor nested_from_tensor_list(c10::DispatchKeySet ks, at::TensorList list, std::optional<at::ScalarType> dtype,
                                   std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                   std::optional<bool> pin_memory);
// The NestedTensorPrivateUse1 fallback: refuses any use of one.
void refuse_nested(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*);
// PrivateUse1 kernel of the operators of nested_from_buffer_ops(): refuses one made over a flagos buffer.
void refuse_nested_buffer(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*);
// The operators that make a nested tensor of the strided layout from a dense
// buffer (their CPU and CUDA kernels; the size metadata are CPU tensors).
c10::ArrayRef<const char*> nested_from_buffer_ops();

}  // namespace ops
}  // namespace torch_fl
