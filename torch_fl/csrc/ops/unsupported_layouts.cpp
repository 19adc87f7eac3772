// The fallbacks of the sparse and quantized dispatch keys of flagos: every
// operator that would make or use such a tensor on flagos failed with
// PyTorch's "Could not run 'aten::...' with arguments from the 'Sparseflagos'
// backend"; they raise the refusal of tensor/unsupported_layouts.h instead.
#include "ops/unsupported_layouts.h"

#include "route/counters.h"
#include "tensor/unsupported_layouts.h"

namespace torch_fl {
namespace ops {

namespace {

std::string called_on(const c10::OperatorHandle& op) {
  return "aten::" + route::overload_name(op.operator_name()) + " was called on one or would make one";
}

}  // namespace

void refuse_sparse(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*) {
  tensor::refuse_layout(tensor::Unsupported::kSparse, called_on(op));
}

void refuse_quantized(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*) {
  tensor::refuse_layout(tensor::Unsupported::kQuantized, called_on(op));
}

}  // namespace ops
}  // namespace torch_fl
