// The refusal of sparse, quantized and mkldnn tensors on flagos
// (tensor/unsupported_layouts.h).
#include "tensor/unsupported_layouts.h"

#include <c10/util/Exception.h>

namespace torch_fl {
namespace tensor {

void refuse_layout(Unsupported kind, const std::string& where) {
  switch (kind) {
    case Unsupported::kSparse:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "flagos: sparse tensors are not supported on flagos (", where,
                                  "): PyTorch implements sparse kernels per device, CPU and CUDA, and has none for "
                                  "another device. Keep the sparse tensor on the CPU, or make it dense (.to_dense()) "
                                  "and move the dense tensor to flagos.");
    case Unsupported::kQuantized:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "flagos: quantized tensors are not supported on flagos (", where,
                                  "): PyTorch implements quantized kernels per device and has none for another "
                                  "device. Quantize on the CPU (x.cpu()) and keep the quantized tensor there, or "
                                  "dequantize it (.dequantize()) and move the result to flagos.");
    case Unsupported::kMkldnn:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "flagos: mkldnn tensors are not supported on flagos (", where,
                                  "): they are a CPU layout. Convert on the CPU (x.cpu().to_mkldnn()).");
  }
  TORCH_INTERNAL_ASSERT(false, "flagos: unknown unsupported layout");
}

void check_result_layout(c10::DispatchKeySet keys) {
  const char* where = "a flagos operation would make one";
  if (keys.has_any(c10::DispatchKeySet({c10::DispatchKey::Sparse, c10::DispatchKey::SparseCsr}))) {
    refuse_layout(Unsupported::kSparse, where);
  }
  if (keys.has(c10::DispatchKey::Quantized)) {
    refuse_layout(Unsupported::kQuantized, where);
  }
  if (keys.has(c10::DispatchKey::MkldnnCPU)) {
    refuse_layout(Unsupported::kMkldnn, where);
  }
}

}  // namespace tensor
}  // namespace torch_fl
