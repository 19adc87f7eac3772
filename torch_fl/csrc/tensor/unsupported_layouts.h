// Tensors flagos does not hold: sparse (COO, CSR, CSC, BSR, BSC), quantized
// and mkldnn tensors. PyTorch implements them per device (SparseCPU /
// SparseCUDA, QuantizedCPU / QuantizedCUDA kernels, mkldnn on the CPU alone)
// and has none for a PrivateUse1 device. They are refused where they would
// appear: by the fallbacks of their dispatch keys (ops/unsupported_layouts.cpp)
// and where a backing kernel's result becomes a flagos tensor
// (route::adopt_result), with one message per kind that names the way out.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace torch_fl {
namespace tensor {

enum class Unsupported { kSparse, kQuantized, kMkldnn };

// Raises NotImplementedError for a `kind` tensor on flagos; `where` says
// which operation met it ("aten::add.Tensor was called on one or would make one").
[[noreturn]] void refuse_layout(Unsupported kind, const std::string& where);

// A backing kernel's result (its dispatch keys) that flagos cannot hold
// (sparse, quantized, mkldnn) raises refuse_layout(); any other passes.
// Called off the per-call path only: for results without storage and results
// whose keys are not a fresh dense tensor's.
void check_result_layout(c10::DispatchKeySet keys);

}  // namespace tensor
}  // namespace torch_fl
