// The _foreach addcmul/addcdiv operators whose `scalars` is a tensor, read on
// the host as CUDA reads them.
#pragma once

#include "route/kernel_list.h"

namespace torch_fl {
namespace route {

// A flagos kernel for each of _foreach_addcmul(_).Tensor and
// _foreach_addcdiv(_).Tensor, for the native route's library
// (route/register.cpp), on every backing.
KernelList foreach_scalars_kernels();

}  // namespace route
}  // namespace torch_fl
