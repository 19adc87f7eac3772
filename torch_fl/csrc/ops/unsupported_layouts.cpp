// Sparse (COO, CSR, CSC, BSR, BSC) and quantized tensors on flagos. PyTorch
// implements them per device (SparseCPU/SparseCUDA, QuantizedCPU/QuantizedCUDA
// kernels) and has none for a PrivateUse1 device, so every operator that
// would make or use one on flagos failed with PyTorch's "Could not run
// 'aten::...' with arguments from the 'Sparseflagos' backend". The fallbacks
// of their dispatch keys raise a NotImplementedError that names the
// limitation and the ways out instead.
#include "ops/unsupported_layouts.h"

#include "route/counters.h"

#include <c10/util/Exception.h>

#include <string>

namespace torch_fl {
namespace ops {

void refuse_sparse(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "flagos: sparse tensors are not supported on flagos (aten::",
                              route::overload_name(op.operator_name()),
                              " was called on one or would make one): PyTorch implements sparse kernels per device, "
                              "CPU and CUDA, and has none for another device. Keep the sparse tensor on the CPU, or "
                              "make it dense (.to_dense()) and move the dense tensor to flagos.");
}

void refuse_quantized(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "flagos: quantized tensors are not supported on flagos (aten::",
                              route::overload_name(op.operator_name()),
                              " was called on one or would make one): PyTorch implements quantized kernels per "
                              "device and has none for another device. Keep the quantized tensor on the CPU, or "
                              "dequantize it (.dequantize()) and move the result to flagos.");
}

}  // namespace ops
}  // namespace torch_fl
