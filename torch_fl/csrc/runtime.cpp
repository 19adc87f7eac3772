// Runtime over the backing device: allocator, device guard, hooks.
#include "flagos.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <unordered_set>

namespace torch_fl {

Backing g_backing;

namespace {

constexpr int kMaxDevices = 64;
thread_local c10::DeviceIndex tls_host_device = 0;

// ---------------------------------------------------------------- host stats
struct HostCounters {
  std::atomic<int64_t> allocated{0}, peak{0}, allocations{0}, frees{0};
};
std::array<HostCounters, kMaxDevices> host_counters;

struct HostBlock {
  c10::DataPtr inner;
  size_t nbytes;
  c10::DeviceIndex index;
};

void host_block_delete(void* ctx) {
  auto* block = static_cast<HostBlock*>(ctx);
  auto& c = host_counters[block->index];
  c.allocated -= static_cast<int64_t>(block->nbytes);
  c.frees += 1;
  delete block;
}

// ---------------------------------------------------------------- allocator
std::once_flag cuda_init_once;

struct FlagosAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    const Backing& b = g_backing;
    TORCH_CHECK(b.initialized, "torch_fl: the flagos device is not initialised; import torch_fl first");
    if (b.host) {
      return host_adopt(b.allocator->allocate(nbytes), nbytes, tls_host_device);
    }
    // The CUDA caching allocator needs CUDA's lazy init (normally done by torch.cuda).
    std::call_once(cuda_init_once, [] { at::globalContext().lazyInitDevice(c10::DeviceType::CUDA); });
    c10::DataPtr data = b.allocator->allocate(nbytes);
    data.unsafe_set_device(c10::Device(kFlagos, data.device().index()));
    return data;
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return g_backing.host ? nullptr : g_backing.allocator->raw_deleter();
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    g_backing.allocator->copy_data(dest, src, count);
  }
};
FlagosAllocator flagos_alloc;

// Host "pinned" memory: ordinary host memory, remembered so is_pinned() is true.
std::mutex pinned_mutex;
std::unordered_set<const void*> pinned_ptrs;

void pinned_delete(void* ctx) {
  {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    pinned_ptrs.erase(ctx);
  }
  c10::free_cpu(ctx);
}

struct HostPinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (p) {
      std::lock_guard<std::mutex> lock(pinned_mutex);
      pinned_ptrs.insert(p);
    }
    return {p, p, &pinned_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &pinned_delete;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};
HostPinnedAllocator host_pinned_alloc;

// ---------------------------------------------------------------- streams/events (host)
std::atomic<c10::StreamId> next_host_stream{1};
thread_local std::array<c10::StreamId, kMaxDevices> tls_host_stream{};

struct HostEvent {
  std::chrono::steady_clock::time_point when;
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
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (g_backing.host) {
      tls_host_device = d.index();
    } else if (g_backing.guard) {
      g_backing.guard->uncheckedSetDevice(native_device(d));
    }
  }
  c10::Stream getStream(c10::Device d) const override {
    check_device_index(d.index());
    if (g_backing.host) {
      return c10::Stream(c10::Stream::UNSAFE, d, tls_host_stream[d.index()]);
    }
    return to_flagos_stream(g_backing.guard->getStream(native_device(d)));
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    check_device_index(d.index());
    if (g_backing.host) {
      return c10::Stream(c10::Stream::UNSAFE, d, 0);
    }
    return to_flagos_stream(g_backing.guard->getDefaultStream(native_device(d)));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override {
    check_device_index(d.index());
    if (g_backing.host) {
      return c10::Stream(c10::Stream::UNSAFE, d, next_host_stream++);
    }
    return to_flagos_stream(g_backing.guard->getStreamFromGlobalPool(native_device(d), high_priority));
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    check_device_index(d.index());
    if (g_backing.host) {
      return c10::Stream(c10::Stream::UNSAFE, d, next_host_stream++);
    }
    return to_flagos_stream(g_backing.guard->getNewStream(native_device(d), priority));
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
      // Host work is synchronous: an event is the moment it was recorded.
      if (*event == nullptr) {
        *event = new HostEvent();
      }
      static_cast<HostEvent*>(*event)->when = std::chrono::steady_clock::now();
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
  c10::DeviceIndex deviceCount() const noexcept override {
    return g_backing.count;
  }
  bool queryStream(const c10::Stream& s) const override {
    return g_backing.host ? true : g_backing.guard->queryStream(to_native_stream(s));
  }
  void synchronizeStream(const c10::Stream& s) const override {
    if (!g_backing.host) {
      g_backing.guard->synchronizeStream(to_native_stream(s));
    }
  }
  void synchronizeEvent(void* event) const override {
    if (!g_backing.host) {
      g_backing.guard->synchronizeEvent(event);
    }
  }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    if (!g_backing.host) {
      g_backing.guard->synchronizeDevice(index);
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
      auto d = static_cast<HostEvent*>(e2)->when - static_cast<HostEvent*>(e1)->when;
      return std::chrono::duration<double, std::milli>(d).count();
    }
    return g_backing.guard->elapsedTime(e1, e2, index);
  }
};
FlagosGuardImpl guard_impl;

// ---------------------------------------------------------------- hooks
c10::DeviceIndex index_or_current(c10::DeviceIndex i) {
  c10::DeviceIndex index = i < 0 ? current_device() : i;
  check_device_index(index);  // CUDA indexes its per-device tables unchecked
  return index;
}

struct FlagosHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }
  bool isAvailable() const override {
    return g_backing.initialized && g_backing.count > 0;
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex i) const override {
    // flagos:i draws from its backing device's generator, so a seeded model
    // built on flagos equals one built natively.
    if (g_backing.host) {
      return at::detail::getDefaultCPUGenerator();
    }
    return at::detail::getCUDAHooks().getDefaultGenerator(index_or_current(i));
  }
  at::Generator getNewGenerator(c10::DeviceIndex i) const override {
    if (g_backing.host) {
      return at::detail::createCPUGenerator();
    }
    return at::detail::getCUDAHooks().getNewGenerator(index_or_current(i));
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
    guard_impl.setDevice(c10::Device(kFlagos, i));
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex i) const override {
    return guard_impl.exchangeDevice(c10::Device(kFlagos, i)).index();
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

c10::DeviceIndex current_device() {
  if (g_backing.host) {
    return tls_host_device;
  }
  return g_backing.guard->getDevice().index();
}

void check_device_index(c10::DeviceIndex index) {
  // Numbers are formatted with std::to_string: streaming an integer from this
  // library crashed inside libstdc++ on the GPU machine's toolchain.
  TORCH_CHECK_INDEX(index >= 0 && index < g_backing.count, "flagos device index ", std::to_string(index),
                    " is out of range: this process has ", std::to_string(g_backing.count), " flagos device(s) (",
                    g_backing.host ? "host memory; set FLAGOS_HOST_DEVICES=N for more" : "one per CUDA device",
                    "); use an index from 0 to ", std::to_string(g_backing.count - 1));
}

c10::Allocator* flagos_allocator() {
  return &flagos_alloc;
}
c10::Allocator* host_pinned_allocator() {
  return &host_pinned_alloc;
}
bool host_is_pinned(const void* ptr) {
  std::lock_guard<std::mutex> lock(pinned_mutex);
  return pinned_ptrs.count(ptr) > 0;
}

c10::DataPtr host_adopt(c10::DataPtr&& data, size_t nbytes, c10::DeviceIndex index) {
  void* raw = data.get();
  auto& c = host_counters[index];
  auto now = (c.allocated += static_cast<int64_t>(nbytes));
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
  c.allocations += 1;
  auto* block = new HostBlock{std::move(data), nbytes, index};
  return {raw, block, &host_block_delete, c10::Device(kFlagos, index)};
}

HostMemStats host_memory_stats(c10::DeviceIndex index) {
  check_device_index(index);
  auto& c = host_counters[index];
  return {c.allocated.load(), c.peak.load(), c.allocations.load(), c.frees.load()};
}

void host_reset_peak(c10::DeviceIndex index) {
  check_device_index(index);
  host_counters[index].peak = host_counters[index].allocated.load();
}

void register_guard() {
  static c10::impl::DeviceGuardImplRegistrar registrar(kFlagos, &guard_impl);
  c10::SetAllocator(kFlagos, &flagos_alloc);
}

void register_hooks() {
  TORCH_CHECK(!at::isPrivateUse1HooksRegistered(),
              "torch_fl: another package already registered a PrivateUse1 backend (hooks present); flagos cannot "
              "share the process with it. Import torch_fl in a process without that package.");
  at::RegisterPrivateUse1HooksInterface(&hooks_impl);
}

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
  register_metadata_ops();
  register_native_route();
  register_autocast_and_sdp();
  register_autograd_shortcut();
}

}  // namespace torch_fl
