// flagos's PrivateUse1 hooks: what ATen asks a device backend outside the
// dispatcher (generators, pinned memory, device count, storage resize).
#pragma once

namespace torch_fl {
namespace runtime {

// Raises if another package already registered PrivateUse1 hooks.
void register_hooks();

}  // namespace runtime
}  // namespace torch_fl
