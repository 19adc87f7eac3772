// The native route: the backing device's own kernels on zero-copy aliases,
// for every operator without another PrivateUse1 registration.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torch_fl {
namespace route {

// Registers the boxed PrivateUse1 fallback, the typed kernels of the hottest
// operators (route/typed_native.cpp) and the direct registrations of
// operators PyTorch would otherwise decompose on flagos.
void register_native_route();
// True when the native route may own `op` at PrivateUse1: the backing device
// runs it and PyTorch does not decompose it above autograd.
bool native_route_may_own(const c10::OperatorHandle& op);
// Run an operator's native route or the CPU fallback on a boxed stack,
// bypassing the dispatcher (for Python backends that fall back).
void call_native(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void call_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace route
}  // namespace torch_fl
