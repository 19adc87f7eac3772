// check_written_overlaps (route/overlap_check.h): out of line, for the rare
// calls that need it.
#include "route/overlap_check.h"

#include "tensor/ivalue_tensors.h"

#include <ATen/MemoryOverlap.h>

namespace torch_fl {
namespace route {

namespace {

bool is_written(const c10::Argument& a) {
  return a.alias_info() != nullptr && a.alias_info()->isWrite();
}

}  // namespace

void check_written_overlaps(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  const auto& params = op.schema().arguments();
  const size_t n = std::min(params.size(), args.size());
  for (size_t i = 0; i < n; ++i) {
    if (!is_written(params[i])) {
      continue;
    }
    tensor::for_each_tensor(args[i], [&](const at::Tensor& written, tensor::TensorIn) {
      if (!written.defined()) {
        return;
      }
      // As TensorIterator: each written tensor against each input (full overlap is allowed: x.add_(x)).
      for (size_t j = 0; j < n; ++j) {
        if (is_written(params[j])) {
          continue;
        }
        tensor::for_each_tensor(args[j], [&](const at::Tensor& input, tensor::TensorIn) {
          if (input.defined()) {
            at::assert_no_partial_overlap(written, input);
          }
        });
      }
    });
  }
}

}  // namespace route
}  // namespace torch_fl
