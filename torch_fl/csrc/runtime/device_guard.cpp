// flagos's DeviceGuardImpl: the current device, streams and events. On a GPU
// each call goes to the backing device's own guard with the device type
// swapped; on host backing the current device and stream are thread-local
// state and work is synchronous.
#include "runtime/device_guard.h"

#include "runtime/device.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <chrono>
#include <string>

namespace torch_fl {
namespace runtime {

namespace {

thread_local c10::DeviceIndex tls_host_device = 0;

// ---------------------------------------------------------------- streams/events (host)
std::atomic<c10::StreamId> next_host_stream{1};
thread_local std::array<c10::StreamId, kMaxDevices> tls_host_stream{};

struct HostEvent {
  std::chrono::steady_clock::time_point when;
  c10::DeviceIndex index = -1;  // the device of the stream it was last recorded on
};

// ---------------------------------------------------------------- device guard
c10::Stream to_flagos_stream(const c10::Stream& s) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kFlagos, s.device_index()), s.id());
}
c10::Stream to_native_stream(const c10::Stream& s) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(g_backing.type, s.device_index()), s.id());
}
c10::Device native_device(c10::Device d) {
  return c10::Device(g_backing.type, d.index());
}

struct FlagosGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return kFlagos;
  }
  c10::Device exchangeDevice(c10::Device d) const override {
    check_device_index(d.index());
    if (g_backing.host) {
      auto old = tls_host_device;
      tls_host_device = d.index();
      return c10::Device(kFlagos, old);
    }
    return c10::Device(kFlagos, g_backing.guard->exchangeDevice(native_device(d)).index());
  }
  c10::Device getDevice() const override {
    return c10::Device(kFlagos, current_device());
  }
  void setDevice(c10::Device d) const override {
    check_device_index(d.index());
    if (g_backing.host) {
      tls_host_device = d.index();
    } else {
      g_backing.guard->setDevice(native_device(d));
    }
  }
  // A negative index (no device: an un-entered torch.flagos.device(i)'s
  // exit, torch.accelerator's maybeExchangeDevice(-1)) sets nothing, as
  // torch.cuda's _maybe_exchange_device(-1) does.
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() < 0) {
      return;
    }
    if (g_backing.host) {
      tls_host_device = d.index();
    } else if (g_backing.guard) {
      g_backing.guard->uncheckedSetDevice(native_device(d));
    }
  }
  // A stream call without an index (-1: torch.Stream(device="flagos"),
  // torch.Event) means the current device, as on CUDA.
  c10::Stream getStream(c10::Device d) const override {
    const c10::Device dev(kFlagos, index_or_current(d.index()));
    if (g_backing.host) {
      return c10::Stream(c10::Stream::UNSAFE, dev, tls_host_stream[dev.index()]);
    }
    return to_flagos_stream(g_backing.guard->getStream(native_device(dev)));
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    const c10::Device dev(kFlagos, index_or_current(d.index()));
    if (g_backing.host) {
      return c10::Stream(c10::Stream::UNSAFE, dev, 0);
    }
    return to_flagos_stream(g_backing.guard->getDefaultStream(native_device(dev)));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override {
    const c10::Device dev(kFlagos, index_or_current(d.index()));
    if (g_backing.host) {
      return c10::Stream(c10::Stream::UNSAFE, dev, next_host_stream++);
    }
    return to_flagos_stream(g_backing.guard->getStreamFromGlobalPool(native_device(dev), high_priority));
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    const c10::Device dev(kFlagos, index_or_current(d.index()));
    if (g_backing.host) {
      return c10::Stream(c10::Stream::UNSAFE, dev, next_host_stream++);
    }
    return to_flagos_stream(g_backing.guard->getNewStream(native_device(dev), priority));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    check_device_index(s.device_index());
    if (g_backing.host) {
      auto& slot = tls_host_stream[s.device_index()];
      auto old = slot;
      slot = s.id();
      return c10::Stream(c10::Stream::UNSAFE, s.device(), old);
    }
    return to_flagos_stream(g_backing.guard->exchangeStream(to_native_stream(s)));
  }
  void destroyEvent(void* event, const c10::DeviceIndex index) const noexcept override {
    if (g_backing.host) {
      delete static_cast<HostEvent*>(event);
    } else {
      g_backing.guard->destroyEvent(event, index);
    }
  }
  void record(void** event, const c10::Stream& s, const c10::DeviceIndex index, const c10::EventFlag flag)
      const override {
    if (g_backing.host) {
      // CUDA's guard refuses an event of one device recorded on another's stream; so does this one.
      TORCH_CHECK(index == -1 || index == s.device_index(), "Event device index ", std::to_string(index),
                  " does not match recording stream's device index ", std::to_string(s.device_index()), ".");
      // Host work is synchronous: an event is the moment it was recorded.
      if (*event == nullptr) {
        *event = new HostEvent();
      }
      static_cast<HostEvent*>(*event)->when = std::chrono::steady_clock::now();
      static_cast<HostEvent*>(*event)->index = s.device_index();
      return;
    }
    g_backing.guard->record(event, to_native_stream(s), index, flag);
  }
  void block(void* event, const c10::Stream& s) const override {
    if (!g_backing.host) {
      g_backing.guard->block(event, to_native_stream(s));
    }
  }
  bool queryEvent(void* event) const override {
    return g_backing.host ? true : g_backing.guard->queryEvent(event);
  }
#if __has_include(<c10/core/DeviceCapability.h>)
  // torch.accelerator.get_device_capability: every scalar type, as for the
  // CPU and PyTorch's reference PrivateUse1 backend. flagos stores every type,
  // and an operator whose backing kernel lacks one runs on the CPU (counted).
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    index_or_current(d.index());  // checks the index
    return c10::DeviceCapability();
  }
#endif
  c10::DeviceIndex deviceCount() const noexcept override {
    return g_backing.count;
  }
  bool queryStream(const c10::Stream& s) const override {
    return g_backing.host ? true : g_backing.guard->queryStream(to_native_stream(s));
  }
  // Host work is synchronous: the synchronizations only check their device index, as CUDA's do.
  void synchronizeStream(const c10::Stream& s) const override {
    if (!g_backing.host) {
      g_backing.guard->synchronizeStream(to_native_stream(s));
    } else {
      index_or_current(s.device_index());
    }
  }
  void synchronizeEvent(void* event) const override {
    if (!g_backing.host) {
      g_backing.guard->synchronizeEvent(event);
    }
  }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    const c10::DeviceIndex checked = index_or_current(index);  // CUDA's raises for an invalid index too
    if (!g_backing.host) {
      g_backing.guard->synchronizeDevice(checked);
    }
  }
  void recordDataPtrOnStream(const c10::DataPtr& data, const c10::Stream& s) const override {
    if (!g_backing.host) {
      g_backing.guard->recordDataPtrOnStream(data, to_native_stream(s));
    }
  }
  double elapsedTime(void* e1, void* e2, const c10::DeviceIndex index) const override {
    if (g_backing.host) {
      TORCH_CHECK(e1 && e2, "flagos: both events must be recorded before elapsed_time()");
      const auto* a = static_cast<HostEvent*>(e1);
      const auto* b = static_cast<HostEvent*>(e2);
      // CUDA cannot time events of two devices against each other (invalid resource handle).
      TORCH_CHECK(a->index == b->index, "flagos: elapsed_time() of events recorded on two devices (flagos:",
                  std::to_string(a->index), " and flagos:", std::to_string(b->index),
                  "), which CUDA refuses too: record both on streams of one device");
      auto d = b->when - a->when;
      return std::chrono::duration<double, std::milli>(d).count();
    }
    return g_backing.guard->elapsedTime(e1, e2, index);
  }
};
FlagosGuardImpl guard_impl;

}  // namespace

const c10::impl::DeviceGuardImplInterface& flagos_guard() {
  return guard_impl;
}

void register_guard() {
  static c10::impl::DeviceGuardImplRegistrar registrar(kFlagos, &guard_impl);
}

c10::DeviceIndex current_device() {
  if (g_backing.host) {
    return tls_host_device;
  }
  return g_backing.guard->getDevice().index();
}

void invalid_device_index(c10::DeviceIndex index) {
  // CUDA raises AcceleratorError (torch.AcceleratorError) with
  // cudaErrorInvalidDevice for an invalid ordinal; flagos raises the same.
  // Numbers are formatted with std::to_string: streaming an integer from this
  // library crashed inside libstdc++ on the GPU machine's toolchain.
  constexpr int32_t kInvalidDevice = 101;  // cudaErrorInvalidDevice
  std::string msg = "flagos device index " + std::to_string(index) + " is out of range: this process has " +
                    std::to_string(g_backing.count) + " flagos device(s) (" +
                    (g_backing.host ? "host memory; set FLAGOS_HOST_DEVICES=N for more" : "one per CUDA device") +
                    "); use an index from 0 to " + std::to_string(g_backing.count - 1);
  throw c10::AcceleratorError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, kInvalidDevice, std::move(msg));
}

c10::DeviceIndex index_or_current(c10::DeviceIndex index) {
  // -1 alone means the current device (c10's "no index"); -2 is out of range, as on CUDA.
  const c10::DeviceIndex i = index == -1 ? current_device() : index;
  check_device_index(i);
  return i;
}

}  // namespace runtime
}  // namespace torch_fl
