// Zero-copy aliasing between flagos tensors and tensors of the backing device.
//
// An alias is a second StorageImpl over the same bytes, tagged with the other
// device. Its DataPtr context points at the storage it aliases and its
// deleter says how: borrowed (no reference, valid during one kernel call),
// owning (holds a reference to the flagos storage) or owning-native (a flagos
// storage holding a reference to a native one). The deleter identifies an
// alias, so a kernel result that views an input maps back to the original
// storage and views keep one storage.
#include "flagos.h"

#include <c10/core/StorageImpl.h>

namespace torch_fl {

namespace {

void borrowed_deleter(void*) {}

void owning_flagos_deleter(void* ctx) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
}

void owning_native_deleter(void* ctx) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
}

c10::intrusive_ptr<c10::StorageImpl> reclaim(void* ctx) {
  return c10::intrusive_ptr<c10::StorageImpl>::unsafe_reclaim_from_nonowning(static_cast<c10::StorageImpl*>(ctx));
}

// A tensor over `storage` with the geometry and view bits of `like`.
at::Tensor tensor_over(c10::intrusive_ptr<c10::StorageImpl> storage, c10::DispatchKey key, const at::Tensor& like) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(std::move(storage)), c10::DispatchKeySet(key),
                                                    like.dtype());
  auto* impl = t.unsafeGetTensorImpl();
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  if (C10_UNLIKELY(like.is_conj())) {
    impl->_set_conj(true);
  }
  if (C10_UNLIKELY(like.is_neg())) {
    impl->_set_neg(true);
  }
  return t;
}

c10::DispatchKey flagos_key() {
  return c10::DispatchKey::PrivateUse1;
}

}  // namespace

namespace {

// Equal sizes, strides and storage offset. A loop over a few dimensions:
// ArrayRef's operator== calls memcmp, which cost more than the rest of a
// borrow (callgrind, 2026-11-30).
bool same_geometry(const c10::TensorImpl& a, const c10::TensorImpl& b) {
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

// Leaked per thread on purpose: tensors must not be destroyed during thread or
// process teardown, when the allocator behind them may already be gone. A
// plain pointer, set on first use: a thread_local with a dynamic initialiser
// would run its guard on every access.
thread_local AliasPool* thread_alias_pool = nullptr;
thread_local AliasPool* thread_python_alias_pool = nullptr;

// The storage of a tensor without the access check of TensorImpl::storage();
// a tensor that has none (a wrapper that must not be unwrapped) still gets
// that check's error.
c10::StorageImpl* storage_of(const at::Tensor& t) {
  c10::StorageImpl* st = t.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  return C10_LIKELY(st != nullptr) ? st : t.storage().unsafeGetStorageImpl();
}

}  // namespace

size_t AliasPool::key(const c10::TensorImpl& t) {
  // A few numbers that tell a model's shapes apart, not all of them: take()
  // compares the whole geometry anyway.
  const c10::IntArrayRef sizes = t.sizes();
  const c10::IntArrayRef strides = t.strides();
  const uint64_t dim = sizes.size();
  const uint64_t outer = dim > 0 ? static_cast<uint64_t>(sizes[0]) ^ (static_cast<uint64_t>(strides[0]) << 20) : 0;
  const uint64_t inner = dim > 1 ? static_cast<uint64_t>(sizes[dim - 1]) ^ (static_cast<uint64_t>(strides[dim - 1]) << 20) : 0;
  const uint64_t h = (static_cast<uint64_t>(t.numel()) + (dim << 40) +
                      (static_cast<uint64_t>(t.dtype().toScalarType()) << 48) + static_cast<uint64_t>(t.storage_offset())) *
                         0x9E3779B97F4A7C15ull +
                     outer * 0xC2B2AE3D27D4EB4Full + inner * 0x165667B19E3779F9ull;
  return h >> 57;  // the top 7 bits, which mix all of the above: 0 .. kSlots - 1
}

at::Tensor AliasPool::take(const c10::TensorImpl& like, size_t k, bool& shaped) {
  at::Tensor* slot = &slots_[k];
  for (size_t i = 0; i < kProbe; ++i) {
    if (slot[i].defined() && same_geometry(*slot[i].unsafeGetTensorImpl(), like)) {
      shaped = true;
      return std::move(slot[i]);
    }
  }
  shaped = false;
  for (size_t i = 0; i < kProbe; ++i) {
    if (slot[i].defined()) {
      return std::move(slot[i]);
    }
  }
  if (!spare_.empty()) {
    at::Tensor alias = std::move(spare_.back());
    spare_.pop_back();
    return alias;
  }
  return {};  // a new alias, kept under this key afterwards
}

void AliasPool::give(at::Tensor&& alias, size_t k) {
  at::Tensor* slot = &slots_[k];
  for (size_t i = 0; i < kProbe; ++i) {
    if (!slot[i].defined()) {
      slot[i] = std::move(alias);
      return;
    }
  }
  if (spare_.size() < kSpare) {
    spare_.push_back(std::move(alias));
  }
}

AliasPool& alias_pool() {
  AliasPool* pool = thread_alias_pool;
  if (C10_UNLIKELY(pool == nullptr)) {
    pool = thread_alias_pool = new AliasPool();
  }
  return *pool;
}

AliasPool& python_alias_pool() {
  AliasPool* pool = thread_python_alias_pool;
  if (C10_UNLIKELY(pool == nullptr)) {
    pool = thread_python_alias_pool = new AliasPool(/*python=*/true);
  }
  return *pool;
}

at::Tensor borrow_native(const at::Tensor& flagos, AliasPool& pool, size_t& key) {
  const c10::TensorImpl& like = *flagos.unsafeGetTensorImpl();
  c10::StorageImpl* src = storage_of(flagos);
  const c10::DataPtr& data = src->data_ptr();
  if (C10_UNLIKELY(data.get_deleter() == &owning_native_deleter)) {
    return native_alias(flagos, /*owning=*/false);
  }
  key = AliasPool::key(like);
  bool shaped = false;
  at::Tensor alias = pool.take(like, key, shaped);
  if (C10_UNLIKELY(!alias.defined())) {
    return native_alias(flagos, /*owning=*/false);
  }
  const Backing& b = g_backing;
  auto* impl = alias.unsafeGetTensorImpl();
  // The recycled alias keeps its own StorageImpl: only the bytes it points at
  // change (no reference counting on the hot path).
  c10::StorageImpl* st = impl->unsafe_storage().unsafeGetStorageImpl();
  const c10::Device device(b.type, b.host ? -1 : like.device().index());
  st->set_data_ptr_noswap(c10::DataPtr(src->mutable_data(), src, &borrowed_deleter, device));
  st->set_nbytes(src->nbytes());
  st->set_resizable(src->resizable());
  // The TensorImpl caches its device: refresh it (and the dtype) on change.
  if (impl->dtype() != like.dtype() || impl->device() != device) {
    impl->set_storage_and_dtype(impl->unsafe_storage(), like.dtype());
  }
  if (!shaped) {
    impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  }
  if (C10_UNLIKELY(impl->is_conj() != like.is_conj())) {
    impl->_set_conj(like.is_conj());
  }
  if (C10_UNLIKELY(impl->is_neg() != like.is_neg())) {
    impl->_set_neg(like.is_neg());
  }
  return alias;
}

namespace {

// True when only `t` holds its TensorImpl, apart from, possibly, the tensor's
// own Python object with no reference left in Python but the tensor's (a
// result a Python kernel made and returned, held by PyRoute with the GIL):
// retagging it in place is then invisible, and the caller gets that Python
// object back instead of a new one.
bool sole_holder(const at::Tensor& t) {
  const size_t n = t.use_count();
  if (n == 1) {
    return true;
  }
  const c10::impl::PyObjectSlot* slot = t.unsafeGetTensorImpl()->pyobj_slot();
  return n == 2 && slot->load_pyobj() != nullptr && slot->has_unique_reference();
}

}  // namespace

void release_borrowed(at::Tensor&& alias, c10::StorageImpl* alias_storage, AliasPool& pool, size_t key) {
  auto* impl = alias.unsafeGetTensorImpl();
  // Recycle only what nothing else references and the kernel left as made.
  // A Python kernel's pool also keeps an alias whose only other holder is
  // its own Python object, which nothing in Python references any more.
  const bool sole = pool.python() ? sole_holder(alias) : alias.use_count() == 1;
  if (sole && impl->unsafe_storage().unsafeGetStorageImpl() == alias_storage &&
      c10::raw::intrusive_ptr::use_count(alias_storage) == 1 &&
      alias_storage->data_ptr().get_deleter() == &borrowed_deleter) {
    if (pool.python()) {
      // Its Python object stays reachable while it waits (gc.get_objects()):
      // an empty tensor over no memory, not a view of bytes that may be freed.
      alias_storage->set_data_ptr_noswap(c10::DataPtr(nullptr, alias_storage->device()));
      alias_storage->set_nbytes(0);
      impl->set_sizes_contiguous({0});
    }
    // The key of the geometry set at the borrow: a kernel that reshaped the
    // alias only costs the next borrow from that slot a reshape.
    pool.give(std::move(alias), key);
  }
}

at::Tensor native_alias(const at::Tensor& flagos, bool owning) {
  c10::StorageImpl* src = flagos.storage().unsafeGetStorageImpl();
  const Backing& b = g_backing;
  const c10::Device device(b.type, b.host ? -1 : flagos.device().index());
  const c10::DataPtr& data = src->data_ptr();
  // A flagos storage that itself wraps a native one: hand back the original.
  if (C10_UNLIKELY(data.get_deleter() == &owning_native_deleter)) {
    return tensor_over(reclaim(data.get_context()), b.key, flagos);
  }
  void* ptr = src->mutable_data();
  c10::DataPtr alias_data;
  if (owning) {
    c10::raw::intrusive_ptr::incref(src);
    alias_data = c10::DataPtr(ptr, src, &owning_flagos_deleter, device);
  } else {
    alias_data = c10::DataPtr(ptr, src, &borrowed_deleter, device);
  }
  auto storage = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), src->nbytes(),
                                                       std::move(alias_data), b.allocator, src->resizable());
  return tensor_over(std::move(storage), b.key, flagos);
}

namespace {

// The flagos storage behind a native storage if it is one of our aliases.
c10::intrusive_ptr<c10::StorageImpl> aliased_flagos_storage(c10::StorageImpl* native) {
  const c10::DataPtr& data = native->data_ptr();
  auto deleter = data.get_deleter();
  if (deleter == &borrowed_deleter || deleter == &owning_flagos_deleter) {
    return reclaim(data.get_context());
  }
  return {};
}

c10::intrusive_ptr<c10::StorageImpl> wrap_native_storage(c10::StorageImpl* native, c10::DeviceIndex index,
                                                         bool may_steal) {
  const c10::Device device(kFlagos, index);
  const size_t nbytes = native->nbytes();
  c10::DataPtr data;
  if (may_steal && c10::raw::intrusive_ptr::use_count(native) == 1) {
    // Sole owner: take the memory over, keeping the backing allocator's
    // deleter (the CUDA caching allocator then still knows the block).
    data = native->set_data_ptr(c10::DataPtr(nullptr, native->device()));
    native->set_nbytes(0);
    if (g_backing.host) {
      data = host_adopt(std::move(data), nbytes, index);
    } else {
      data.unsafe_set_device(device);
    }
  } else {
    c10::raw::intrusive_ptr::incref(native);
    data = c10::DataPtr(native->mutable_data(), native, &owning_native_deleter, device);
  }
  return c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes, std::move(data),
                                               flagos_allocator(), native->resizable());
}

}  // namespace

at::Tensor flagos_alias(const at::Tensor& native, c10::DeviceIndex index) {
  c10::StorageImpl* src = native.storage().unsafeGetStorageImpl();
  if (auto original = aliased_flagos_storage(src)) {
    return tensor_over(std::move(original), flagos_key(), native);
  }
  return tensor_over(wrap_native_storage(src, index, /*may_steal=*/false), flagos_key(), native);
}

at::Tensor adopt_result(at::Tensor&& native, c10::DeviceIndex index) {
  c10::StorageImpl* src = storage_of(native);
  if (auto original = aliased_flagos_storage(src)) {
    return tensor_over(std::move(original), flagos_key(), native);
  }
  auto* impl = native.unsafeGetTensorImpl();
  // Whoever else holds the tensor sees its storage: then the memory can
  // only be shared, never taken over.
  const bool sole = sole_holder(native) && c10::raw::intrusive_ptr::use_count(src) == 1;
  if (sole && !impl->is_inference() && impl->allow_tensor_metadata_change()) {
    // A fresh result that nothing else holds: turn it into a flagos tensor in
    // place (retag its memory and dispatch keys) rather than wrapping it.
    const c10::Device device(kFlagos, index);
    if (g_backing.host) {
      src->set_data_ptr_noswap(host_adopt(src->set_data_ptr(c10::DataPtr(nullptr, src->device())), src->nbytes(),
                                          index));
    } else {
      src->mutable_data_ptr().unsafe_set_device(device);
    }
    src->set_allocator(flagos_allocator());
    // Refreshes the device the TensorImpl caches. Moving its own storage out
    // and back in (it is the sole holder) spares a reference-count round trip.
    impl->set_storage_keep_dtype(std::move(const_cast<c10::Storage&>(impl->unsafe_storage())));
    impl->_change_backend_component_keys(device);
    return std::move(native);
  }
  return tensor_over(wrap_native_storage(src, index, /*may_steal=*/sole), flagos_key(), native);
}

void sync_back_if_changed(const at::Tensor& flagos, const at::Tensor& alias, c10::StorageImpl* alias_storage) {
  const auto* dst = flagos.unsafeGetTensorImpl();
  if (alias_storage->data_ptr().get() != flagos.storage().unsafeGetStorageImpl()->data_ptr().get() ||
      alias.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl() != alias_storage ||
      !same_geometry(*dst, *alias.unsafeGetTensorImpl())) {
    sync_back(flagos, alias, alias_storage);
  }
}

void sync_back(const at::Tensor& flagos, const at::Tensor& alias, c10::StorageImpl* alias_storage) {
  auto* dst = flagos.unsafeGetTensorImpl();
  c10::StorageImpl* now = alias.storage().unsafeGetStorageImpl();
  const c10::DeviceIndex index = flagos.device().index();
  if (C10_UNLIKELY(now != alias_storage)) {
    // The kernel pointed the argument at another storage.
    c10::intrusive_ptr<c10::StorageImpl> replacement = aliased_flagos_storage(now);
    if (!replacement) {
      replacement = wrap_native_storage(now, index, /*may_steal=*/false);
    }
    dst->set_storage_keep_dtype(c10::Storage(std::move(replacement)));
  } else if (C10_UNLIKELY(alias_storage->data_ptr().get_deleter() != &borrowed_deleter &&
                          alias_storage->data_ptr().get_deleter() != &owning_flagos_deleter)) {
    // The kernel resized the storage: it now owns fresh backing memory.
    c10::StorageImpl* target = flagos.storage().unsafeGetStorageImpl();
    const size_t nbytes = alias_storage->nbytes();
    c10::DataPtr data = alias_storage->set_data_ptr(c10::DataPtr(nullptr, alias_storage->device()));
    if (g_backing.host) {
      data = host_adopt(std::move(data), nbytes, index);
    } else {
      data.unsafe_set_device(c10::Device(kFlagos, index));
    }
    target->set_data_ptr_noswap(std::move(data));
    target->set_nbytes(nbytes);
  }
  if (!same_geometry(*dst, *alias.unsafeGetTensorImpl())) {
    dst->set_sizes_and_strides(alias.sizes(), alias.strides(), alias.storage_offset());
  }
}

}  // namespace torch_fl
