// flagos memory over the backing device's allocator.
#include "runtime/allocator.h"

#include "runtime/device.h"

#include <ATen/Context.h>
#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include <unistd.h>

namespace torch_fl {
namespace runtime {

namespace {

// ---------------------------------------------------------------- host stats
// A host backing's byte and block counts per device, kept as PyTorch's caching
// allocators keep theirs (current, peak, allocated and freed totals): host
// memory has no cache, so reserved and active memory equal allocated memory.
// Atomics: blocks are allocated and freed on any thread.
struct HostCounters {
  std::atomic<int64_t> bytes{0}, bytes_peak{0}, bytes_in{0}, bytes_out{0};
  std::atomic<int64_t> blocks{0}, blocks_peak{0}, blocks_in{0}, blocks_out{0};
  std::atomic<int64_t> ooms{0};
  // The totals at the last reset_accumulated_memory_stats (reported from there).
  std::atomic<int64_t> origin_bytes_in{0}, origin_bytes_out{0}, origin_blocks_in{0}, origin_blocks_out{0},
      origin_ooms{0};
};
// Indexed only through counters(): host backing has at most kMaxDevices devices.
std::array<HostCounters, kMaxDevices> host_counters;

inline HostCounters& counters(c10::DeviceIndex index) {
  check_device_index(index);
  return host_counters[static_cast<size_t>(index)];
}

inline void raise_peak(std::atomic<int64_t>& peak, int64_t now) {
  int64_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

struct HostBlock {
  c10::DataPtr inner;
  size_t nbytes;
  c10::DeviceIndex index;
};

void host_block_delete(void* ctx) {
  auto* block = static_cast<HostBlock*>(ctx);
  auto& c = host_counters[static_cast<size_t>(block->index)];  // checked when counted (host_adopt)
  const auto n = static_cast<int64_t>(block->nbytes);
  c.bytes -= n;
  c.bytes_out += n;
  c.blocks -= 1;
  c.blocks_out += 1;
  delete block;
}

// The memory of a CPU storage in shared memory, as the inner DataPtr of a
// host block (host_adopt_shared): holds a reference to that storage.
void host_shared_release(void* ctx) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
}

c10::CachingAllocator::Stat host_stat(int64_t current, int64_t peak, int64_t in, int64_t out) {
  c10::CachingAllocator::Stat s;
  s.current = current;
  s.peak = peak;
  s.allocated = in;
  s.freed = out;
  return s;
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
    raise_host_oom(index, "flagos: out of memory allocating " + std::to_string(nbytes) + " bytes on flagos:" +
                              std::to_string(index) + " (host memory): " + e.what_without_backtrace());
  }
}

// The backing device's allocator as a c10::DeviceAllocator (CUDA's caching
// allocator is one): flagos memory on a GPU is that allocator's memory, so its
// statistics, cache and stream records are flagos's.
c10::DeviceAllocator* backing_device_allocator() {
  std::call_once(cuda_init_once, [] { at::globalContext().lazyInitDevice(c10::DeviceType::CUDA); });
  return c10::getDeviceAllocator(g_backing.type);
}

// A c10::DeviceAllocator, so that torch.accelerator's memory functions (what
// accelerate, Trainer and Lightning call) answer for flagos.
struct FlagosAllocator final : c10::DeviceAllocator {
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

  bool initialized() override {
    return g_backing.initialized;
  }
  void emptyCache(c10::MempoolId_t mempool_id) override {
    if (!g_backing.host) {  // host memory keeps no cache
      backing_device_allocator()->emptyCache(mempool_id);
    }
  }
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (!g_backing.host) {  // host work is synchronous: nothing to wait for
      backing_device_allocator()->recordStream(
          ptr, c10::Stream(c10::Stream::UNSAFE, c10::Device(g_backing.type, stream.device_index()), stream.id()));
    }
  }
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex index) override {
    if (!g_backing.host) {
      check_device_index(index);
      return backing_device_allocator()->getDeviceStats(index);
    }
    return host_device_stats(index);
  }
  void resetAccumulatedStats(c10::DeviceIndex index) override {
    if (!g_backing.host) {
      check_device_index(index);
      backing_device_allocator()->resetAccumulatedStats(index);
      return;
    }
    auto& c = counters(index);
    c.origin_bytes_in = c.bytes_in.load();
    c.origin_bytes_out = c.bytes_out.load();
    c.origin_blocks_in = c.blocks_in.load();
    c.origin_blocks_out = c.blocks_out.load();
    c.origin_ooms = c.ooms.load();
  }
  void resetPeakStats(c10::DeviceIndex index) override {
    if (!g_backing.host) {
      check_device_index(index);
      backing_device_allocator()->resetPeakStats(index);
      return;
    }
    auto& c = counters(index);
    c.bytes_peak = c.bytes.load();
    c.blocks_peak = c.blocks.load();
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex index) override {
    check_device_index(index);
    if (!g_backing.host) {
      return backing_device_allocator()->getMemoryInfo(index);
    }
    // Every virtual device shares the host's memory.
    const auto page = static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
    return {page * static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)), page * static_cast<size_t>(sysconf(_SC_PHYS_PAGES))};
  }
};
FlagosAllocator flagos_alloc;

// Host "pinned" memory: ordinary host memory, remembered so is_pinned() is
// true, and counted. It is PyTorch's host allocator for flagos on host backing
// (torch.accelerator.empty_host_cache); nothing is cached and work is
// synchronous, so there is nothing to empty or wait for.
std::mutex pinned_mutex;
std::unordered_map<const void*, size_t> pinned_ptrs;
at::HostStats pinned_stats;

void pinned_delete(void* ctx) {
  {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    auto it = pinned_ptrs.find(ctx);
    if (it != pinned_ptrs.end()) {
      pinned_stats.active_requests.decrease(1);
      pinned_stats.active_bytes.decrease(it->second);
      pinned_stats.allocations.decrease(1);
      pinned_stats.allocated_bytes.decrease(it->second);
      pinned_stats.num_host_free += 1;
      pinned_ptrs.erase(it);
    }
  }
  c10::free_cpu(ctx);
}

struct HostPinnedAllocator final : at::HostAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (p) {
      std::lock_guard<std::mutex> lock(pinned_mutex);
      pinned_ptrs.emplace(p, nbytes);
      pinned_stats.active_requests.increase(1);
      pinned_stats.active_bytes.increase(nbytes);
      pinned_stats.allocations.increase(1);
      pinned_stats.allocated_bytes.increase(nbytes);
      pinned_stats.num_host_alloc += 1;
    }
    return {p, p, &pinned_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &pinned_delete;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  bool record_event(void* ptr, void* ctx, c10::Stream stream) override {
    return true;
  }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    return pinned_stats;
  }
  void reset_accumulated_stats() override {
    reset_pinned_stats(/*peak=*/false);
  }
  void reset_peak_stats() override {
    reset_pinned_stats(/*peak=*/true);
  }
  // The pinned stats' peaks, or their accumulated counts (and the alloc/free counts).
  void reset_pinned_stats(bool peak) {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    for (auto* stat : {&pinned_stats.active_requests, &pinned_stats.active_bytes, &pinned_stats.allocations,
                       &pinned_stats.allocated_bytes}) {
      if (peak) {
        stat->reset_peak();
      } else {
        stat->reset_accumulated();
      }
    }
    if (!peak) {
      pinned_stats.num_host_alloc = pinned_stats.num_host_free = 0;
    }
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
  const auto n = static_cast<int64_t>(nbytes);
  raise_peak(c.bytes_peak, c.bytes += n);
  c.bytes_in += n;
  raise_peak(c.blocks_peak, c.blocks += 1);
  c.blocks_in += 1;
  auto* block = new HostBlock{std::move(data), nbytes, index};
  return {raw, block, &host_block_delete, c10::Device(kFlagos, index)};
}

namespace {

void check_shared(const c10::StorageImpl& shared) {
  TORCH_CHECK(g_backing.host, "torch_fl: host shared memory is flagos memory on a host backing only; flagos is ",
              "backed by ", c10::DeviceTypeName(g_backing.type, true), " in this process");
  TORCH_CHECK(shared.device_type() == c10::DeviceType::CPU,
              "torch_fl: expected a CPU storage in shared memory, got one on ", shared.device());
}

// Counts `shared`'s memory as flagos memory of device `index`, holding `shared`.
c10::DataPtr host_adopt_shared(c10::intrusive_ptr<c10::StorageImpl> shared, c10::DeviceIndex index) {
  check_device_index(index);
  const size_t nbytes = shared->nbytes();
  void* raw = shared->mutable_data();
  c10::DataPtr inner(raw, shared.release(), &host_shared_release, c10::Device(c10::DeviceType::CPU));
  return host_adopt(std::move(inner), nbytes, index);
}

}  // namespace

void host_move_to_shared(c10::StorageImpl* flagos, c10::intrusive_ptr<c10::StorageImpl> shared) {
  check_shared(*shared);
  TORCH_CHECK(flagos->device_type() == kFlagos, "torch_fl: expected a flagos storage, got one on ", flagos->device());
  const size_t nbytes = flagos->nbytes();
  TORCH_CHECK(shared->nbytes() == nbytes, "torch_fl: the shared memory has ", shared->nbytes(),
              " bytes for a flagos storage of ", nbytes);
  if (nbytes > 0) {
    std::memcpy(shared->mutable_data(), flagos->data(), nbytes);
  }
  flagos->set_data_ptr_noswap(host_adopt_shared(std::move(shared), flagos->device().index()));
  // Shared memory has the size it was made with (a resize would move it out).
  flagos->set_resizable(false);
}

c10::intrusive_ptr<c10::StorageImpl> host_wrap_shared(c10::intrusive_ptr<c10::StorageImpl> shared,
                                                      c10::DeviceIndex index) {
  check_shared(*shared);
  const size_t nbytes = shared->nbytes();
  return c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                               host_adopt_shared(std::move(shared), index), &flagos_alloc,
                                               /*resizable=*/false);
}

c10::StorageImpl* host_shared_storage(const c10::StorageImpl* flagos) {
  const c10::DataPtr& data = flagos->data_ptr();
  if (data.get_deleter() != &host_block_delete) {
    return nullptr;
  }
  const auto* block = static_cast<const HostBlock*>(data.get_context());
  if (block->inner.get_deleter() != &host_shared_release) {
    return nullptr;
  }
  return static_cast<c10::StorageImpl*>(block->inner.get_context());
}

void raise_host_oom(c10::DeviceIndex index, const std::string& what) {
  counters(index).ooms += 1;
  throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                              what + ". Free the flagos tensors you no longer need (torch.flagos.memory_allocated(" +
                                  std::to_string(index) + ") counts what flagos:" + std::to_string(index) +
                                  " holds) or use smaller ones.");
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

c10::CachingDeviceAllocator::DeviceStats host_device_stats(c10::DeviceIndex index) {
  auto& c = counters(index);
  const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  const auto bytes = host_stat(c.bytes.load(), c.bytes_peak.load(), c.bytes_in.load() - c.origin_bytes_in.load(),
                               c.bytes_out.load() - c.origin_bytes_out.load());
  const auto blocks = host_stat(c.blocks.load(), c.blocks_peak.load(), c.blocks_in.load() - c.origin_blocks_in.load(),
                                c.blocks_out.load() - c.origin_blocks_out.load());
  c10::CachingDeviceAllocator::DeviceStats stats;
  // Each block is its own segment, allocated and active while it lives.
  stats.allocated_bytes[agg] = bytes;
  stats.reserved_bytes[agg] = bytes;
  stats.active_bytes[agg] = bytes;
  stats.requested_bytes[agg] = bytes;
  stats.allocation[agg] = blocks;
  stats.segment[agg] = blocks;
  stats.active[agg] = blocks;
  stats.num_ooms = c.ooms.load() - c.origin_ooms.load();
  return stats;
}

void register_allocator() {
  c10::SetAllocator(kFlagos, &flagos_alloc);
  // PyTorch's host (pinned) allocator for flagos: CUDA's on a GPU, as Tensor.pin_memory() uses there.
  at::setHostAllocator(kFlagos, g_backing.host ? &host_pinned_alloc : at::getHostAllocator(c10::DeviceType::CUDA));
}

}  // namespace runtime
}  // namespace torch_fl
