// The cpu_fallback route's kernel: an operator's CPU kernel on host copies
// that keep the flagos arguments' memory layout.
//
// PyTorch's at::native::cpu_fallback copies each tensor argument to the host
// on its own, densely. The CPU kernel then sees neither that two arguments
// share memory (an out= argument that is an input passes where the CPU
// raises "refer to a single memory location"), nor a written argument that
// overlaps itself (an expanded output), nor the inputs' layout (a broadcast
// or transposed input; TensorIterator lays its result out after its inputs).
// Here each flagos storage an argument uses is copied once, the bytes the
// call's tensors span, and every argument becomes a view of that copy with
// its own sizes, strides and offset: the CPU kernel sees what it would see on
// the CPU, checks included. Storages the call writes are copied back; an out=
// argument the kernel resized takes the host result's geometry.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Device.h>

namespace torch_fl {
namespace route {

// Runs `op`'s CPU kernel for a call on flagos:`index` (its tensors' device;
// -1: the current one) on the stack's arguments, leaving its results there.
void run_on_host_copies(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex index);

}  // namespace route
}  // namespace torch_fl
