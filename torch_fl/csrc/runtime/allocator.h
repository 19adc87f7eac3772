// flagos memory: the allocator of flagos storages, host "pinned" memory, the
// byte accounting of a host backing, host shared memory, and storage resizes.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>
#include <c10/core/StorageImpl.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace torch_fl {
namespace runtime {

// The allocator registered for flagos (a c10::DeviceAllocator): the backing
// device's memory, tagged (and on host backing counted) as flagos memory.
c10::Allocator* flagos_allocator();
c10::Allocator* host_pinned_allocator();
bool host_is_pinned(const void* ptr);

// Host backing only: counts the bytes of a DataPtr as flagos memory of device
// `index` and retags it; returns the counted DataPtr.
c10::DataPtr host_adopt(c10::DataPtr&& data, size_t nbytes, c10::DeviceIndex index);

// Host backing's shared memory (torch_fl/multiprocessing.py): flagos memory
// that is the memory of a CPU storage in shared memory, made by PyTorch's
// sharing strategies (an fd, or a named file of torch_shm_manager), counted as
// flagos memory of its device like any other. host_move_to_shared copies a
// flagos storage's bytes into `shared` (a CPU storage of the same size) and
// makes them its memory in place, as Storage._share_fd_cpu_ does on the CPU:
// every tensor over the storage follows, its old memory is freed, and it can
// no longer be resized.
void host_move_to_shared(c10::StorageImpl* flagos, c10::intrusive_ptr<c10::StorageImpl> shared);
// A flagos storage of device `index` over `shared`'s memory (a consumer's rebuild).
c10::intrusive_ptr<c10::StorageImpl> host_wrap_shared(c10::intrusive_ptr<c10::StorageImpl> shared,
                                                      c10::DeviceIndex index);
// The CPU storage whose shared memory a host-backed flagos storage is; nullptr
// when it is not in shared memory.
c10::StorageImpl* host_shared_storage(const c10::StorageImpl* flagos);
// Host backing: counts an allocation that failed on flagos:index (memory_stats'
// num_ooms) and raises c10::OutOfMemoryError (torch.OutOfMemoryError), as
// CUDA's allocator does. `what`: the failure, which the message starts with.
[[noreturn]] void raise_host_oom(c10::DeviceIndex index, const std::string& what);

// Resizes a flagos storage to `nbytes`, keeping its contents.
void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes);

// Host backing's memory statistics, in the shape of a caching allocator's
// (the flagos allocator's getDeviceStats answers with them on host backing).
c10::CachingDeviceAllocator::DeviceStats host_device_stats(c10::DeviceIndex index);

// Makes flagos_allocator() PyTorch's allocator for flagos.
void register_allocator();

}  // namespace runtime
}  // namespace torch_fl
