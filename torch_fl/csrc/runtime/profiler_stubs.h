// flagos in PyTorch's profiler: the PrivateUse1 profiler stubs, which
// time each operator on the device for torch.autograd.profiler.profile(
// use_device="flagos") (and whichever profiler mode asks for device events).
#pragma once

namespace torch_fl {
namespace runtime {

// Registers the stubs (torch::profiler::impl::registerPrivateUse1Methods).
// After the device guard: events go through it.
void register_profiler_stubs();

}  // namespace runtime
}  // namespace torch_fl
