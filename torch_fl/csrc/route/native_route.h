// The native route: the backing device's own kernels on zero-copy aliases,
// for every operator without another PrivateUse1 registration.
#pragma once

#include "route/kernel_list.h"
#include "route/routed_args.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Device.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

namespace torch_fl {
namespace route {

// The native route's kernels, registered by route/register.cpp: the boxed
// PrivateUse1 fallback; on host backing, native_dropout drawing from the
// flagos generator; and the direct kernels of operators PyTorch would
// otherwise decompose on flagos (read after the kernels registered before
// them: operators with a PrivateUse1 kernel are left alone).
torch::CppFunction native_route_fallback();
KernelList native_route_host_kernels();
KernelList native_route_direct_kernels();
// True when the native route may own `op` at PrivateUse1: the backing device
// runs it and PyTorch does not decompose it above autograd.
bool native_route_may_own(const c10::OperatorHandle& op);
// The native route of an operator on a boxed stack, as its PrivateUse1
// fallback runs it: the backing device's kernel (the CPU fallback where the
// backing device has none), logged and counted. For routes that run natively
// for some calls (python/py_route.h) and the routing layer's fallbacks.
void run_native_route(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack);
// Operators that write arguments and return nothing (_foreach_add_,
// _fused_adam_, _amp_foreach_non_finite_check_and_unscale_) have no
// ADInplaceOrView kernel to bump the versions of what they write: CUDA's
// kernels bump them themselves, the CPU's composites through their per-tensor
// in-place calls. On flagos those calls reach native aliases, so every route
// bumps the flagos tensors: WrittenArguments keeps them before the call and
// bumps them after it succeeds, as CUDA's kernels do (autograd then sees a
// saved tensor changed; an inference tensor outside inference_mode raises).
bool writes_without_returning(const c10::FunctionSchema& schema);
class WrittenArguments {
 public:
  WrittenArguments(const c10::FunctionSchema& schema, const torch::jit::Stack& stack);
  void bump() const;

 private:
  c10::SmallVector<at::Tensor, 8> tensors_;
};
// PyTorch's CPU fallback on a boxed stack (the cpu_fallback backend), logged and counted.
void call_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// Where the kernel of a routed call on flagos:index (-1: the current device)
// raised `e`. On host backing the CPU kernels allocate their results and
// temporaries with the CPU's allocator, whose failure is a plain c10::Error:
// that one is raised as flagos's out-of-memory error instead, counted for the
// device (torch.OutOfMemoryError, memory_stats' num_ooms), as an allocation of
// flagos's own and every CUDA allocation are. Returns for any other error
// (the caller rethrows it) and on a GPU, whose kernels allocate with CUDA's allocator.
C10_NOINLINE void raise_if_host_oom(const c10::Error& e, const c10::OperatorHandle& op, c10::DeviceIndex index);
// The same for a call on aliases: a call whose results go to a native device
// (a device argument: x.cpu() is _to_copy(x, device="cpu")) failed to allocate
// that device's memory, not flagos's, and raises as that device does.
inline void raise_if_host_oom(const c10::Error& e, const c10::OperatorHandle& op, const RoutedArgs& args) {
  if (!args.to_native_device()) {
    raise_if_host_oom(e, op, args.index());
  }
}

}  // namespace route
}  // namespace torch_fl
