// The PrivateUse1 profiler stubs (runtime/profiler_stubs.h).
//
// As PyTorch's CUDA stubs do, an operator's device time is the time between
// two events recorded on the current stream at its start and end. On a CUDA
// backing they are the backing guard's timed CUDA events, reached through the
// flagos device guard (recorded on the current CUDA stream, so device time is
// kernel time; no CUDA header needed); on host memory the host clock at
// record time (host work is synchronous, so that is the operator's own time).
#include "runtime/profiler_stubs.h"

#include "runtime/device.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <chrono>
#include <memory>

namespace torch_fl {
namespace runtime {

namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

const c10::impl::DeviceGuardImplInterface* flagos_guard() {
  return c10::impl::getDeviceGuardImpl(kFlagos);
}

// One recorded event and the device it belongs to (elapsed time is read on
// it); on host memory only the moment it was recorded.
struct Recorded {
  void* event = nullptr;
  c10::DeviceIndex index = 0;
  std::chrono::steady_clock::time_point when;
  Recorded() = default;
  Recorded(const Recorded&) = delete;
  Recorded& operator=(const Recorded&) = delete;
  ~Recorded() {
    if (event != nullptr) {
      flagos_guard()->destroyEvent(event, index);
    }
  }
};

struct FlagosProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    const c10::DeviceIndex index = current_device();
    if (device != nullptr) {
      *device = index;
    }
    auto recorded = std::make_shared<Recorded>();
    recorded->index = index;
    if (cpu_ns != nullptr) {
      *cpu_ns = c10::getTime();
    }
    if (g_backing.host) {
      recorded->when = std::chrono::steady_clock::now();  // host work is synchronous
    } else {
      const auto* guard = flagos_guard();
      // BACKEND_DEFAULT: a timed event (CUDA's default flags), where
      // PYTORCH_DEFAULT would disable timing.
      guard->record(&recorded->event, guard->getStream(c10::Device(kFlagos, index)), index,
                    c10::EventFlag::BACKEND_DEFAULT);
    }
    *event = std::move(recorded);
  }

  // Microseconds, as the CUDA stubs report.
  float elapsed(const ProfilerVoidEventStub* start, const ProfilerVoidEventStub* end) const override {
    const auto* a = static_cast<const Recorded*>(start->get());
    const auto* b = static_cast<const Recorded*>(end->get());
    TORCH_CHECK(a != nullptr && b != nullptr, "flagos profiler: an operator's start or end event was not recorded");
    if (g_backing.host) {
      return static_cast<float>(std::chrono::duration<double, std::micro>(b->when - a->when).count());
    }
    TORCH_CHECK(a->event != nullptr && b->event != nullptr,
                "flagos profiler: an operator's start or end event was not recorded");
    const auto* guard = flagos_guard();
    guard->synchronizeEvent(b->event);
    return static_cast<float>(guard->elapsedTime(a->event, b->event, b->index) * 1000.0);
  }

  // No annotation tool (NVTX's role for CUDA) on flagos.
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}

  bool enabled() const override {
    return true;
  }

  void onEachDevice(std::function<void(int)> op) const override {
    for (c10::DeviceIndex i = 0; i < g_backing.count; ++i) {
      c10::DeviceGuard guard(c10::Device(kFlagos, i));
      op(i);
    }
  }

  void synchronize() const override {
    flagos_guard()->synchronizeDevice(current_device());
  }
};

}  // namespace

void register_profiler_stubs() {
  static FlagosProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
}

}  // namespace runtime
}  // namespace torch_fl
