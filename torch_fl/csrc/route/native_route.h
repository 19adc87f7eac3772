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
// The native route of an operator on a boxed stack, as its PrivateUse1
// fallback runs it: the backing device's kernel (the CPU fallback where the
// backing device has none), logged and counted. For routes that run natively
// for some calls (python/py_route.h) and the routing layer's fallbacks.
void run_native_route(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack);
// PyTorch's CPU fallback on a boxed stack (the cpu_fallback backend), logged and counted.
void call_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace route
}  // namespace torch_fl
