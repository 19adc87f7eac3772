// Operator/dtype pairs that CUDA's kernels accept and the CPU's do not, run on
// host backing by the CPU kernel in a wider dtype where that is exact.
#pragma once

#include "route/kernel_list.h"

#include <string>
#include <vector>

namespace torch_fl {
namespace route {

// On host backing, a kernel for each overload in the gap table, for the
// native route's library (route/register.cpp): a call in a gap dtype runs
// widened, any other call the native route as before. None on a CUDA backing,
// whose kernels cover these dtypes.
KernelList dtype_gap_kernels();
// The gap table's entries dtype_gap_kernels() gave, as
// "op.overload: dtype, ... -> wide dtype" (empty on a CUDA backing).
std::vector<std::string> registered_dtype_gaps();

}  // namespace route
}  // namespace torch_fl
