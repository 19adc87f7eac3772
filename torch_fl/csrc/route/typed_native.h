// Typed native kernels for the operators models call most (route/typed_ops.h).
#pragma once

#include "route/kernel_list.h"

namespace torch_fl {
namespace route {

// Those the native route may own, for its library (route/register.cpp
// registers them before the boxed route, which then leaves them alone).
KernelList typed_native_kernels();

}  // namespace route
}  // namespace torch_fl
