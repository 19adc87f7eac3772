// flagos's PrivateUse1 hooks: generators (runtime/generator.cpp), pinned
// memory, device count and storage resizes, answered from the backing device.
#include "runtime/hooks.h"

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/device_guard.h"
#include "runtime/generator.h"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/util/Exception.h>

namespace torch_fl {
namespace runtime {

namespace {

struct FlagosHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }
  bool isAvailable() const override {
    return g_backing.initialized && g_backing.count > 0;
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex i) const override {
    return default_generator(i);
  }
  at::Generator getNewGenerator(c10::DeviceIndex i) const override {
    return new_generator(i);
  }
  c10::Device getDeviceFromPtr(void* data) const override {
    if (g_backing.host) {
      return c10::Device(kFlagos, current_device());
    }
    return c10::Device(kFlagos, at::detail::getCUDAHooks().getDeviceFromPtr(data).index());
  }
  bool isPinnedPtr(const void* data) const override {
    return g_backing.host ? host_is_pinned(data) : at::detail::getCUDAHooks().isPinnedPtr(data);
  }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    return g_backing.host ? host_pinned_allocator() : at::detail::getCUDAHooks().getPinnedMemoryAllocator();
  }
  bool hasPrimaryContext(c10::DeviceIndex i) const override {
    return g_backing.host ? true : at::detail::getCUDAHooks().hasPrimaryContext(index_or_current(i));
  }
  void init() const override {
    if (g_backing.initialized && !g_backing.host) {
      at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    }
  }
  c10::DeviceIndex deviceCount() const override {
    return g_backing.count;
  }
  void setCurrentDevice(c10::DeviceIndex i) const override {
    flagos_guard().setDevice(c10::Device(kFlagos, i));
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex i) const override {
    return flagos_guard().exchangeDevice(c10::Device(kFlagos, i)).index();
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex i) const override {
    return exchangeDevice(i);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), nbytes);
  }
};
FlagosHooks hooks_impl;

}  // namespace

void register_hooks() {
  TORCH_CHECK(!at::isPrivateUse1HooksRegistered(),
              "torch_fl: another package already registered a PrivateUse1 backend (hooks present); flagos cannot "
              "share the process with it. Import torch_fl in a process without that package.");
  at::RegisterPrivateUse1HooksInterface(&hooks_impl);
}

}  // namespace runtime
}  // namespace torch_fl
