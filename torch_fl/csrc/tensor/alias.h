// Zero-copy aliases between flagos tensors and tensors of the backing device.
//
// An alias is a second StorageImpl over the same bytes, tagged with the other
// device. Its DataPtr context points at the storage it aliases and its deleter
// says how: borrowed (no reference, valid during one kernel call), owning
// (holds a reference to the flagos storage) or owning-native (a flagos storage
// holding a reference to a native one). The deleter identifies an alias, so a
// kernel result that views an input maps back to the original storage and
// views keep one storage.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/ArrayRef.h>

namespace torch_fl {
namespace tensor {

// The three kinds of alias DataPtr, told apart by their deleter.
void borrowed_deleter(void*);
void owning_flagos_deleter(void*);
void owning_native_deleter(void*);

// A view of a flagos tensor as a tensor of the backing device over the same
// bytes. `owning` aliases keep the flagos storage alive; borrowed ones are for
// the duration of one kernel call.
at::Tensor native_alias(const at::Tensor& flagos, bool owning);
// A borrowed alias of `flagos` over the storage of `sibling`, a borrowed
// alias of another flagos tensor over the same storage: a kernel given both
// sees that they overlap (PyTorch compares storages, not addresses).
at::Tensor native_alias_sharing(const at::Tensor& flagos, const at::Tensor& sibling);
// A flagos tensor over the bytes of a backing-device tensor (owning).
at::Tensor flagos_alias(const at::Tensor& native, c10::DeviceIndex index);
// torch_fl._C.as_native / as_flagos: the same, checking the tensor's device
// (as_flagos: index -1 is the current device on host backing; a CUDA
// tensor's own device otherwise).
at::Tensor as_native(const at::Tensor& flagos);
at::Tensor as_flagos(const at::Tensor& native, int64_t index);
// A flagos tensor for a kernel result that the routed call's in-place retag
// does not take (route/routed_args.cpp has that fast path): one of our aliases
// mapped back, or a wrapper over (or the taken-over memory of) its storage.
at::Tensor adopt_result_slow(at::Tensor&& native, c10::DeviceIndex index);
// Gives `flagos` the storage and geometry the kernel left on its alias (an
// out= argument the kernel resized or re-pointed). `memory`: also move fresh
// memory the kernel gave the alias storage into the flagos storage (false for
// an alias sharing the storage of an earlier one, whose sync moved it).
void sync_back(const at::Tensor& flagos, const at::Tensor& alias, c10::StorageImpl* alias_storage,
               bool memory = true);
// sync_back when the alias's storage, data or geometry differs from flagos's.
void sync_back_if_changed(const at::Tensor& flagos, const at::Tensor& alias, c10::StorageImpl* alias_storage);

// Equal sizes, strides and storage offset. A loop over a few dimensions:
// ArrayRef's operator== calls memcmp, which costs more than the rest of a
// borrow (benchmarks/route_instructions.py counts it).
inline bool same_geometry(const c10::TensorImpl& a, const c10::TensorImpl& b) {
  const c10::IntArrayRef sizes = a.sizes();
  const c10::IntArrayRef other = b.sizes();
  const size_t n = sizes.size();
  if (n != other.size() || a.storage_offset() != b.storage_offset()) {
    return false;
  }
  const c10::IntArrayRef strides = a.strides();
  const c10::IntArrayRef other_strides = b.strides();
  for (size_t i = 0; i < n; ++i) {
    if (sizes[i] != other[i] || strides[i] != other_strides[i]) {
      return false;
    }
  }
  return true;
}

// The storage of a tensor without the access check of TensorImpl::storage();
// a tensor that has none gets the refusal of its layout where flagos does not
// hold it (a sparse or mkldnn result, tensor/unsupported_layouts.h), else that
// check's error (a wrapper that must not be unwrapped).
C10_NOINLINE c10::StorageImpl* storage_of_slow(const at::Tensor& t);
inline c10::StorageImpl* storage_of(const at::Tensor& t) {
  c10::StorageImpl* st = t.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  return C10_LIKELY(st != nullptr) ? st : storage_of_slow(t);
}

// True when only `t` holds its TensorImpl, apart from, possibly, the tensor's
// own Python object with no reference left in Python but the tensor's (a
// result a Python kernel made and returned, held by PyRoute with the GIL):
// retagging it in place is then invisible, and the caller gets that Python
// object back instead of a new one.
inline bool sole_holder(const at::Tensor& t) {
  const size_t n = t.use_count();
  if (C10_LIKELY(n == 1)) {
    return true;
  }
  const c10::impl::PyObjectSlot* slot = t.unsafeGetTensorImpl()->pyobj_slot();
  return n == 2 && slot->load_pyobj() != nullptr && slot->has_unique_reference();
}

}  // namespace tensor
}  // namespace torch_fl
