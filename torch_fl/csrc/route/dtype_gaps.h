// Operator/dtype pairs that CUDA's kernels accept and the CPU's do not, run on
// host backing by the CPU kernel in a wider dtype where that is exact.
#pragma once

#include <torch/library.h>

#include <string>
#include <vector>

namespace torch_fl {
namespace route {

// On host backing, registers in `library` (the native route's) a kernel for
// each overload in the gap table: a call in a gap dtype runs widened, any
// other call the native route as before. Registers nothing on a CUDA backing,
// whose kernels cover these dtypes.
void register_dtype_gaps(torch::Library& library);
// The gap table's entries registered by register_dtype_gaps, as
// "op.overload: dtype, ... -> wide dtype" (empty on a CUDA backing).
std::vector<std::string> registered_dtype_gaps();

}  // namespace route
}  // namespace torch_fl
