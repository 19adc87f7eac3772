// flagos memory: the allocator of flagos storages, host "pinned" memory, the
// byte accounting of a host backing, and storage resizes.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/StorageImpl.h>

#include <cstddef>
#include <cstdint>

namespace torch_fl {
namespace runtime {

// The allocator registered for flagos: the backing device's memory, tagged
// (and on host backing counted) as flagos memory.
c10::Allocator* flagos_allocator();
c10::Allocator* host_pinned_allocator();
bool host_is_pinned(const void* ptr);

// Host backing only: counts the bytes of a DataPtr as flagos memory of device
// `index` and retags it; returns the counted DataPtr.
c10::DataPtr host_adopt(c10::DataPtr&& data, size_t nbytes, c10::DeviceIndex index);

// Resizes a flagos storage to `nbytes`, keeping its contents.
void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes);

// Host memory statistics (host backing only; CUDA backing uses CUDA's).
struct HostMemStats {
  int64_t allocated = 0, peak = 0, allocations = 0, frees = 0, ooms = 0;
};
HostMemStats host_memory_stats(c10::DeviceIndex index);
void host_reset_peak(c10::DeviceIndex index);

// Makes flagos_allocator() PyTorch's allocator for flagos.
void register_allocator();

}  // namespace runtime
}  // namespace torch_fl
