// Zero-copy aliasing between flagos tensors and tensors of the backing device
// (tensor/alias.h says how an alias is made and recognised).
#include "tensor/alias.h"

#include "tensor/unsupported_layouts.h"

#include "runtime/allocator.h"
#include "runtime/device.h"

#include <ATen/core/TensorBody.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StorageImpl.h>

#include <optional>

namespace torch_fl {
namespace tensor {

using runtime::Backing;
using runtime::g_backing;

void borrowed_deleter(void*) {}

void owning_flagos_deleter(void* ctx) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
}

void owning_native_deleter(void* ctx) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
}

namespace {

c10::intrusive_ptr<c10::StorageImpl> reclaim(void* ctx) {
  return c10::intrusive_ptr<c10::StorageImpl>::unsafe_reclaim_from_nonowning(static_cast<c10::StorageImpl*>(ctx));
}

// A tensor over `storage` with the geometry and view bits of `like`. A
// native alias (`normal`) is never an inference tensor, whatever the mode it
// is made in: the alias pool hands it to later calls in any mode, and a
// kernel's in-place call on an inference tensor outside inference_mode
// raises. A flagos tensor is one as any new tensor is (torch.inference_mode).
at::Tensor tensor_over(c10::intrusive_ptr<c10::StorageImpl> storage, c10::DispatchKey key, const at::Tensor& like,
                       bool normal = false) {
  std::optional<c10::InferenceMode> not_inference;
  if (normal && C10_UNLIKELY(c10::InferenceMode::is_enabled())) {
    not_inference.emplace(false);
  }
  auto t = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(std::move(storage)), c10::DispatchKeySet(key),
                                                    like.dtype());
  not_inference.reset();
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

at::Tensor native_alias(const at::Tensor& flagos, bool owning) {
  c10::StorageImpl* src = flagos.storage().unsafeGetStorageImpl();
  const Backing& b = g_backing;
  const c10::Device device(b.type, b.host ? -1 : flagos.device().index());
  const c10::DataPtr& data = src->data_ptr();
  // A flagos storage that itself wraps a native one: hand back the original.
  if (C10_UNLIKELY(data.get_deleter() == &owning_native_deleter)) {
    return tensor_over(reclaim(data.get_context()), b.key, flagos, /*normal=*/!owning);
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
  return tensor_over(std::move(storage), b.key, flagos, /*normal=*/!owning);
}

at::Tensor native_alias_sharing(const at::Tensor& flagos, const at::Tensor& sibling) {
  return tensor_over(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage_of(sibling)), g_backing.key, flagos,
                     /*normal=*/true);
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
      data = runtime::host_adopt(std::move(data), nbytes, index);
    } else {
      data.unsafe_set_device(device);
    }
  } else {
    c10::raw::intrusive_ptr::incref(native);
    data = c10::DataPtr(native->mutable_data(), native, &owning_native_deleter, device);
  }
  return c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes, std::move(data),
                                               runtime::flagos_allocator(), native->resizable());
}

}  // namespace

at::Tensor flagos_alias(const at::Tensor& native, c10::DeviceIndex index) {
  c10::StorageImpl* src = native.storage().unsafeGetStorageImpl();
  if (auto original = aliased_flagos_storage(src)) {
    return tensor_over(std::move(original), flagos_key(), native);
  }
  return tensor_over(wrap_native_storage(src, index, /*may_steal=*/false), flagos_key(), native);
}

c10::StorageImpl* storage_of_slow(const at::Tensor& t) {
  check_result_layout(t.key_set());
  return t.storage().unsafeGetStorageImpl();
}

at::Tensor adopt_result_slow(at::Tensor&& native, c10::DeviceIndex index) {
  check_result_layout(native.key_set());
  c10::StorageImpl* src = storage_of(native);
  if (auto original = aliased_flagos_storage(src)) {
    return tensor_over(std::move(original), flagos_key(), native);
  }
  // Whoever else holds the storage sees it: then the memory can only be
  // shared, never taken over.
  const bool sole = sole_holder(native) && c10::raw::intrusive_ptr::use_count(src) == 1;
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

void sync_back(const at::Tensor& flagos, const at::Tensor& alias, c10::StorageImpl* alias_storage, bool memory) {
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
  } else if (C10_UNLIKELY(memory && alias_storage->data_ptr().get_deleter() != &borrowed_deleter &&
                          alias_storage->data_ptr().get_deleter() != &owning_flagos_deleter)) {
    // The kernel resized the storage: it now owns fresh backing memory.
    c10::StorageImpl* target = flagos.storage().unsafeGetStorageImpl();
    const size_t nbytes = alias_storage->nbytes();
    c10::DataPtr data = alias_storage->set_data_ptr(c10::DataPtr(nullptr, alias_storage->device()));
    if (g_backing.host) {
      data = runtime::host_adopt(std::move(data), nbytes, index);
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

at::Tensor as_native(const at::Tensor& flagos) {
  TORCH_CHECK(flagos.device().type() == kFlagos, "as_native expects a flagos tensor, got one on ", flagos.device());
  return native_alias(flagos, /*owning=*/true);
}

at::Tensor as_flagos(const at::Tensor& native, int64_t index) {
  const runtime::Backing& b = runtime::backing();
  TORCH_CHECK(native.device().type() == b.type, "as_flagos expects a tensor on the backing device (",
              c10::DeviceTypeName(b.type, true), "), got one on ", native.device());
  c10::DeviceIndex i = b.host ? static_cast<c10::DeviceIndex>(index < 0 ? runtime::current_device() : index)
                              : native.device().index();
  runtime::check_device_index(i);
  return flagos_alias(native, i);
}

}  // namespace tensor
}  // namespace torch_fl
