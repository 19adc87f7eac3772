// Sparse and quantized tensors on flagos: refused at their first use
// (ops/unsupported_layouts.cpp); registered by ops/register.cpp.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torch_fl {
namespace ops {

// The fallbacks of the SparsePrivateUse1 and SparseCsrPrivateUse1 keys.
void refuse_sparse(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*);
// The fallback of the QuantizedPrivateUse1 key.
void refuse_quantized(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*);

}  // namespace ops
}  // namespace torch_fl
