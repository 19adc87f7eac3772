// torch.distributed's collectives (the c10d:: operators) on flagos tensors,
// run by the group's backend for the backing device (route/collectives.cpp).
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include <vector>

#include "route/kernel_list.h"

namespace torch_fl {
namespace route {

// The c10d:: operators PyTorch gives a PrivateUse1 kernel, each with the
// flagos kernel that replaces it; empty where torch has no distributed.
KernelList collective_kernels();

// A future on `devices` that completes with `value` when `source` completes,
// or with its error. The completion is chained in C++ and takes no GIL on the
// engine's thread.
c10::intrusive_ptr<c10::ivalue::Future> future_completed_with(const c10::intrusive_ptr<c10::ivalue::Future>& source,
                                                              c10::IValue value, std::vector<c10::Device> devices);

}  // namespace route
}  // namespace torch_fl
