// flagos memory over the backing device's allocator.
#include "runtime/allocator.h"

#include "runtime/device.h"

#include <ATen/Context.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <unordered_set>

namespace torch_fl {
namespace runtime {

namespace {

// ---------------------------------------------------------------- host stats
struct HostCounters {
  std::atomic<int64_t> allocated{0}, peak{0}, allocations{0}, frees{0}, ooms{0};
};
// Indexed only through counters(): host backing has at most kMaxDevices devices.
std::array<HostCounters, kMaxDevices> host_counters;

inline HostCounters& counters(c10::DeviceIndex index) {
  check_device_index(index);
  return host_counters[static_cast<size_t>(index)];
}

struct HostBlock {
  c10::DataPtr inner;
  size_t nbytes;
  c10::DeviceIndex index;
};

void host_block_delete(void* ctx) {
  auto* block = static_cast<HostBlock*>(ctx);
  auto& c = host_counters[static_cast<size_t>(block->index)];  // checked when counted (host_adopt)
  c.allocated -= static_cast<int64_t>(block->nbytes);
  c.frees += 1;
  delete block;
}

// ---------------------------------------------------------------- allocator
std::once_flag cuda_init_once;

// Host memory for the current flagos device. A failed allocation is counted
// (memory_stats' num_ooms) and raised as c10::OutOfMemoryError
// (torch.OutOfMemoryError), as CUDA's allocator does; the CPU allocator's own
// error (a plain c10::Error) is kept in the message.
c10::DataPtr host_allocate(const Backing& b, size_t nbytes) {
  try {
    return b.allocator->allocate(nbytes);
  } catch (const c10::OutOfMemoryError&) {
    counters(current_device()).ooms += 1;
    throw;
  } catch (const c10::Error& e) {
    const c10::DeviceIndex index = current_device();
    counters(index).ooms += 1;
    throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                "flagos: out of memory allocating " + std::to_string(nbytes) + " bytes on flagos:" +
                                    std::to_string(index) + " (host memory): " + e.what_without_backtrace());
  }
}

struct FlagosAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    const Backing& b = g_backing;
    TORCH_CHECK(b.initialized, "torch_fl: the flagos device is not initialised; import torch_fl first");
    if (b.host) {
      return host_adopt(host_allocate(b, nbytes), nbytes, current_device());
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

}  // namespace

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
  auto& c = counters(index);
  auto now = (c.allocated += static_cast<int64_t>(nbytes));
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
  c.allocations += 1;
  auto* block = new HostBlock{std::move(data), nbytes, index};
  return {raw, block, &host_block_delete, c10::Device(kFlagos, index)};
}

void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  const size_t old = storage->nbytes();
  if (nbytes == old) {
    return;
  }
  c10::DeviceGuard guard(storage->device());
  c10::DataPtr fresh = nbytes ? storage->allocator()->allocate(nbytes) : c10::DataPtr(nullptr, storage->device());
  const size_t keep = std::min(old, nbytes);
  if (keep > 0) {
    // The backing allocator knows how to copy its own memory (cudaMemcpy on GPUs).
    g_backing.allocator->copy_data(fresh.get(), storage->data(), keep);
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}

HostMemStats host_memory_stats(c10::DeviceIndex index) {
  auto& c = counters(index);
  return {c.allocated.load(), c.peak.load(), c.allocations.load(), c.frees.load(), c.ooms.load()};
}

void host_reset_peak(c10::DeviceIndex index) {
  auto& c = counters(index);
  c.peak = c.allocated.load();
}

void register_allocator() {
  c10::SetAllocator(kFlagos, &flagos_alloc);
}

}  // namespace runtime
}  // namespace torch_fl
