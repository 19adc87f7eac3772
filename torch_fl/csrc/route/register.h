// The registrations of route/'s kernels, all in route/register.cpp.
#pragma once

namespace torch_fl {
namespace route {

// Registers the native route (after ops/'s metadata operations, before
// autocast and SDPA: python/module.cpp): the boxed PrivateUse1 fallback, the
// typed kernels of the hottest operators (route/typed_native.h), on host
// backing the dtype gaps (route/dtype_gaps.h), the recurrent cells
// (route/host_rnn.h) and native_dropout, and the direct kernels of operators
// PyTorch would otherwise decompose on flagos (route/native_route.h).
void register_native_route();

}  // namespace route
}  // namespace torch_fl
