// flagos's DeviceGuardImpl: the current device, streams and events, over the
// backing device's own guard (or thread-local state on host backing).
#pragma once

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace torch_fl {
namespace runtime {

const c10::impl::DeviceGuardImplInterface& flagos_guard();
// Registers flagos_guard() for the flagos device type.
void register_guard();

}  // namespace runtime
}  // namespace torch_fl
