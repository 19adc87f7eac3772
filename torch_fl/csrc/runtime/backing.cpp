// The choice of the backing device, and the order in which the device is
// registered with PyTorch.
#include "runtime/device.h"

#include "runtime/allocator.h"
#include "runtime/device_guard.h"
#include "runtime/graph_impl.h"
#include "runtime/hooks.h"
#include "runtime/profiler_stubs.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

namespace torch_fl {
namespace runtime {

Backing g_backing;

namespace {

// Fills the backing's fresh_*_keys: a tensor as a backing-device kernel makes
// its results, outside inference mode and in it (where TensorImpl leaves out
// the autograd keys), and the keys the same tensor has once retagged as flagos
// (route/routed_args.cpp retags results with one compare and one store).
void init_result_keys(Backing& b) {
  for (const bool inference : {false, true}) {
    c10::InferenceMode mode(inference);
    auto probe = c10::make_intrusive<c10::TensorImpl>(c10::DispatchKeySet(b.key), caffe2::TypeMeta::Make<float>(),
                                                      c10::Device(b.type, b.host ? -1 : 0));
    (inference ? b.fresh_native_inference_keys : b.fresh_native_keys) = probe->key_set();
    probe->_change_backend_component_keys(c10::Device(kFlagos, 0));
    (inference ? b.fresh_flagos_inference_keys : b.fresh_flagos_keys) = probe->key_set();
  }
}

}  // namespace

void init(const std::string& backing_type, int64_t host_devices) {
  TORCH_CHECK(!g_backing.initialized, "torch_fl: the flagos device is already initialised");
  Backing b;
  if (backing_type == "cuda") {
    b.type = c10::DeviceType::CUDA;
    b.key = c10::DispatchKey::CUDA;
    b.host = false;
    TORCH_CHECK(at::detail::getCUDAHooks().isAvailable(),
                "torch_fl: FLAGOS_ACCELERATOR=cuda but this PyTorch sees no usable CUDA device");
    b.count = static_cast<c10::DeviceIndex>(at::detail::getCUDAHooks().deviceCount());
  } else if (backing_type == "cpu") {
    TORCH_CHECK(host_devices >= 1 && host_devices <= kMaxDevices,
                "torch_fl: FLAGOS_HOST_DEVICES must be between 1 and ", std::to_string(kMaxDevices), ", got ",
                std::to_string(host_devices));
    b.count = static_cast<c10::DeviceIndex>(host_devices);
  } else {
    TORCH_CHECK(false, "torch_fl: unknown backing device '", backing_type, "' (expected 'cuda' or 'cpu')");
  }
  b.keyset = c10::DispatchKeySet(b.key);
  b.guard = c10::impl::getDeviceGuardImpl(b.type);
  b.allocator = c10::GetAllocator(b.type);
  TORCH_CHECK(b.allocator != nullptr, "torch_fl: no allocator registered for ", c10::DeviceTypeName(b.type));
  b.flagos_allocator = flagos_allocator();
  init_result_keys(b);
  register_hooks();  // first: it fails cleanly if PrivateUse1 is taken
  b.initialized = true;
  g_backing = b;
  register_guard();
  register_allocator();
  register_profiler_stubs();  // after the guard, whose events it records
  register_graph_impl();      // under the backend's name: after the rename
}

}  // namespace runtime
}  // namespace torch_fl
