// The CUDA driver at run time (runtime/cuda_driver.h).
#include "runtime/cuda_driver.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <dlfcn.h>

#include <type_traits>

namespace torch_fl {
namespace runtime {
namespace cuda_driver {

namespace {

// The driver's ABI (cuda.h): results are ints (CUDA_SUCCESS is 0), handles
// are pointers, devices are ints.
using CUresult = int;
constexpr CUresult kSuccess = 0;
constexpr CUresult kInvalidValue = 1;

struct Driver {
  std::string error;  // empty when loaded
  CUresult (*launch_kernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                            void**) = nullptr;
  CUresult (*stream_is_capturing)(void*, int*) = nullptr;
  CUresult (*ctx_get_current)(void**) = nullptr;
  CUresult (*ctx_set_current)(void*) = nullptr;
  CUresult (*device_get)(int*, int) = nullptr;
  CUresult (*primary_ctx_retain)(void**, int) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
  CUresult (*func_get_param_info)(void*, size_t, size_t*, size_t*) = nullptr;  // CUDA 12.4+; may be null

  Driver() {
    // Never closed: kernels launched through it live until exit.
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      error = std::string("libcuda.so.1 could not be loaded (") + (why != nullptr ? why : "no reason given") +
              "): the NVIDIA driver is needed";
      return;
    }
    auto need = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr && error.empty()) {
        error = std::string("libcuda.so.1 has no ") + name + ": the NVIDIA driver is too old";
      }
    };
    need(launch_kernel, "cuLaunchKernel");
    need(stream_is_capturing, "cuStreamIsCapturing");
    need(ctx_get_current, "cuCtxGetCurrent");
    need(ctx_set_current, "cuCtxSetCurrent");
    need(device_get, "cuDeviceGet");
    need(primary_ctx_retain, "cuDevicePrimaryCtxRetain");
    need(get_error_string, "cuGetErrorString");
    func_get_param_info = reinterpret_cast<decltype(func_get_param_info)>(dlsym(lib, "cuFuncGetParamInfo"));
  }
};

const Driver& driver() {
  static const Driver* d = new Driver();  // leaked: used until exit
  return *d;
}

const Driver& loaded() {
  const Driver& d = driver();
  TORCH_CHECK(d.error.empty(), d.error);
  return d;
}

std::string message(const Driver& d, CUresult r) {
  const char* text = nullptr;
  if (d.get_error_string == nullptr || d.get_error_string(r, &text) != kSuccess || text == nullptr) {
    return "CUDA driver error " + std::to_string(r);
  }
  return std::string(text) + " (CUDA driver error " + std::to_string(r) + ")";
}

void check(const Driver& d, CUresult r, const char* call, const char* what) {
  if (C10_UNLIKELY(r != kSuccess)) {
    TORCH_CHECK(false, call, " failed for ", what, ": ", message(d, r));
  }
}

}  // namespace

bool available() {
  return driver().error.empty();
}

std::string unavailable_reason() {
  return driver().error;
}

void* current_stream(c10::DeviceIndex index) {
  const auto* guard = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  return guard->getStream(c10::Device(c10::DeviceType::CUDA, index)).native_handle();
}

bool is_capturing(void* stream) {
  const Driver& d = loaded();
  int status = 0;  // CU_STREAM_CAPTURE_STATUS_NONE
  check(d, d.stream_is_capturing(stream, &status), "cuStreamIsCapturing", "the current stream");
  return status != 0;
}

void ensure_context(c10::DeviceIndex index) {
  const Driver& d = loaded();
  void* ctx = nullptr;
  check(d, d.ctx_get_current(&ctx), "cuCtxGetCurrent", "this thread");
  if (C10_LIKELY(ctx != nullptr)) {
    return;
  }
  int dev = 0;
  check(d, d.device_get(&dev, index), "cuDeviceGet", "the device");
  check(d, d.primary_ctx_retain(&ctx, dev), "cuDevicePrimaryCtxRetain", "the device");
  check(d, d.ctx_set_current(ctx), "cuCtxSetCurrent", "the device");
}

void launch(const Launch& l, void* stream, void** params, const char* what) {
  const Driver& d = loaded();
  check(d,
        d.launch_kernel(l.function, l.grid[0], l.grid[1], l.grid[2], l.block_x, 1, 1, l.shared_bytes, stream, params,
                        nullptr),
        "cuLaunchKernel", what);
}

bool param_layout(void* function, std::vector<std::pair<size_t, size_t>>* out) {
  const Driver& d = loaded();
  if (d.func_get_param_info == nullptr) {
    return false;
  }
  out->clear();
  for (size_t i = 0;; ++i) {
    size_t offset = 0;
    size_t size = 0;
    const CUresult r = d.func_get_param_info(function, i, &offset, &size);
    if (r == kInvalidValue) {  // past the last parameter
      return true;
    }
    if (r != kSuccess) {
      return false;
    }
    out->emplace_back(offset, size);
  }
}

}  // namespace cuda_driver
}  // namespace runtime
}  // namespace torch_fl
