// The flagos device and the native device that backs it.
//
// flagos device i is backed by a native PyTorch device: cuda:i when a GPU is
// used, else host memory (cpu) with a number of virtual devices. Everything
// reaches the backing device through c10's generic interfaces (allocator
// registry, DeviceGuardImpl registry, ATen hooks), so no CUDA header is needed
// to build the core.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/macros/Macros.h>

#include <cstdint>
#include <string>

namespace torch_fl {

constexpr c10::DeviceType kFlagos = c10::DeviceType::PrivateUse1;

namespace runtime {

struct Backing {
  c10::DeviceType type = c10::DeviceType::CPU;
  c10::DispatchKey key = c10::DispatchKey::CPU;
  // The key as a set, made once: routed calls redispatch with it on every call.
  c10::DispatchKeySet keyset{c10::DispatchKey::CPU};
  bool host = true;  // host memory backing (virtual devices)
  c10::DeviceIndex count = 0;
  const c10::impl::DeviceGuardImplInterface* guard = nullptr;
  c10::Allocator* allocator = nullptr;         // the backing device's own allocator
  c10::Allocator* flagos_allocator = nullptr;  // flagos_allocator(), read on every retagged result
  // The dispatch keys of a fresh backing-device tensor, and what they become
  // on flagos (TensorImpl::_change_backend_component_keys, computed once at
  // init): retagging a result is then one compare and one store. The same
  // for a tensor made in inference mode (no autograd keys).
  c10::DispatchKeySet fresh_native_keys;
  c10::DispatchKeySet fresh_flagos_keys;
  c10::DispatchKeySet fresh_native_inference_keys;
  c10::DispatchKeySet fresh_flagos_inference_keys;
  bool initialized = false;
};

// Written once by init(), read on every call afterwards.
extern Backing g_backing;

inline const Backing& backing() {
  return g_backing;
}

// The most devices a host backing may have.
constexpr int kMaxDevices = 64;

// Chooses the backing device ("cuda" or "cpu" with `host_devices` virtual
// devices) and registers the device itself with PyTorch: hooks, guard and
// allocator. Raises on any conflict. Operator kernels are registered after it
// (python/module.cpp: torch_fl._C._init).
void init(const std::string& backing_type, int64_t host_devices);

// Current flagos device index (thread local, as for CUDA).
c10::DeviceIndex current_device();

// The one check of a flagos device index: every way a device reaches the core
// passes it (the device guard's set/exchange, so empty/empty_strided and
// every DeviceGuard; a routed call's device argument, so factories, `_to_copy`
// and `.to()`; host memory's per-device counters; generators and streams).
// Out of range raises c10::AcceleratorError (torch.AcceleratorError), as
// CUDA does for an invalid ordinal. Inline: one compare on the routed path.
[[noreturn]] void invalid_device_index(c10::DeviceIndex index);
inline void check_device_index(c10::DeviceIndex index) {
  if (C10_UNLIKELY(index < 0 || index >= g_backing.count)) {
    invalid_device_index(index);
  }
}
// `index`, or the current device for -1 (CUDA's convention), checked.
c10::DeviceIndex index_or_current(c10::DeviceIndex index);

}  // namespace runtime
}  // namespace torch_fl
