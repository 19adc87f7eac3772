// RoutedArgs: one routed call's borrowed aliases and results
// (route/routed_args.h). The borrow and the release inline the alias pool's
// helpers (tensor/alias_pool.h); the rare cases (no pooled alias, a result
// that views an argument, one that cannot be retagged) are calls out of line,
// and a fresh result's dispatch keys are retagged with one compare and one
// store.
#include "route/routed_args.h"

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/generator.h"
#include "tensor/alias.h"
#include "tensor/alias_pool.h"
#include "tensor/impl_fields.h"
#include "tensor/python_object_hooks.h"
#include "tensor/unsupported_layouts.h"

#include <ATen/core/stack.h>

namespace torch_fl {
namespace route {

using runtime::Backing;
using runtime::g_backing;
using tensor::AliasPool;
using tensor::ImplFields;

namespace {

inline bool is_flagos(const at::Tensor& t) {
  return t.defined() && t.device().type() == kFlagos;
}

// The parts of point_alias() a recycled alias rarely needs, out of line.
C10_NOINLINE void reshape_alias(c10::TensorImpl* impl, const c10::TensorImpl& like) {
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
}
C10_NOINLINE void retype_alias(c10::TensorImpl* impl, const c10::TensorImpl& like) {
  // Refreshes the device the TensorImpl caches (from its storage) and the dtype.
  impl->set_storage_and_dtype(impl->unsafe_storage(), like.dtype());
  if (impl->is_conj() != like.is_conj()) {
    impl->_set_conj(like.is_conj());
  }
  if (impl->is_neg() != like.is_neg()) {
    impl->_set_neg(like.is_neg());
  }
}

// The conjugate and negative bits, which an alias copies from its tensor.
const c10::DispatchKeySet kConjNeg({c10::DispatchKey::Conjugate, c10::DispatchKey::Negative});

// A pooled alias pointed at `src`'s bytes with `like`'s (plain) dtype and
// geometry, on `device`.
inline void point_alias(c10::TensorImpl* impl, const c10::TensorImpl& like, c10::StorageImpl* src, c10::Device device,
                        bool shaped) {
  // The recycled alias keeps its own StorageImpl: only the bytes it points at
  // change (no reference counting on the hot path).
  c10::StorageImpl* st = impl->unsafe_storage().unsafeGetStorageImpl();
  // The pooled alias's DataPtr is a borrowed one (or empty): dropping its
  // context first spares the call of its deleter, which does nothing. Its
  // storage has none of the checks set_data_ptr_noswap() refreshes (no
  // copy-on-write, no access errors), so it is written directly.
  c10::DataPtr& data = st->_mutable_data_ptr_no_checks();
  (void)data.release_context();
  data = c10::DataPtr(src->mutable_data(), src, &tensor::borrowed_deleter, device);
  st->set_nbytes(src->nbytes());
  st->set_resizable(src->resizable());
  if (C10_UNLIKELY(impl->dtype() != like.dtype() || ImplFields::device(*impl) != device ||
                   !((impl->key_set() ^ like.key_set()) & kConjNeg).empty())) {
    retype_alias(impl, like);
  }
  if (!shaped) {
    reshape_alias(impl, like);
  }
}

// Host backing's part of a retag, out of line: its byte accounting is most of
// the code, and on a GPU it only lengthened the retag the GPU runs.
C10_NOINLINE void retag_host_memory(c10::StorageImpl* src, c10::DeviceIndex index) {
  c10::DataPtr taken = src->set_data_ptr(c10::DataPtr(nullptr, src->device()));
  src->set_data_ptr_noswap(runtime::host_adopt(std::move(taken), src->nbytes(), index));
}

// A fresh backing-device result retagged as flagos in place: its memory, its
// cached device and its dispatch keys.
void retag(c10::TensorImpl* impl, c10::StorageImpl* src, c10::DeviceIndex index) {
  const Backing& b = g_backing;
  c10::DispatchKeySet& keys = ImplFields::keys(*impl);
  if (C10_UNLIKELY(keys != b.fresh_native_keys && keys != b.fresh_native_inference_keys)) {
    tensor::check_result_layout(keys);  // a quantized result, say: refused before anything changes
  }
  const c10::Device device(kFlagos, index);
  if (C10_UNLIKELY(b.host)) {
    retag_host_memory(src, index);
  } else {
    src->mutable_data_ptr().unsafe_set_device(device);
  }
  src->set_allocator(b.flagos_allocator);
  ImplFields::device(*impl) = device;  // what set_storage_keep_dtype() would read back from the storage
  if (C10_LIKELY(keys == b.fresh_native_keys)) {
    keys = b.fresh_flagos_keys;  // what _change_backend_component_keys makes of them (init)
  } else if (keys == b.fresh_native_inference_keys) {
    keys = b.fresh_flagos_inference_keys;
  } else {
    impl->_change_backend_component_keys(device);
  }
}

}  // namespace

at::Tensor adopt_result(at::Tensor&& native, c10::DeviceIndex index, bool gil_held) {
  c10::StorageImpl* src = tensor::storage_of(native);
  auto* impl = native.unsafeGetTensorImpl();
  const auto deleter = src->data_ptr().get_deleter();
  // A fresh result that nothing else holds (not a view of one of our aliases,
  // whose deleter says so): turn it into a flagos tensor in place rather than
  // wrapping it. Whoever else holds the tensor or its storage would see the
  // change: those results are wrapped.
  if (C10_LIKELY(deleter != &tensor::borrowed_deleter && deleter != &tensor::owning_flagos_deleter &&
                 (C10_UNLIKELY(gil_held) ? tensor::sole_holder_with_gil(native) : tensor::sole_holder(native)) &&
                 c10::raw::intrusive_ptr::use_count(src) == 1 && impl->allow_tensor_metadata_change())) {
    retag(impl, src, index);
    return std::move(native);
  }
  return tensor::adopt_result_slow(std::move(native), index);
}

// ----------------------------------------------------------------- RoutedArgs
RoutedArgs::RoutedArgs(AliasPool& pool) : pool_(&pool), python_(pool.python()) {}

RoutedArgs::~RoutedArgs() {
  // release() empties borrowed_; aliases left here are those of a kernel that
  // raised: they are dropped, and their slots freed.
  for (const auto& b : borrowed_) {
    pool_->vacate(b.home);
  }
}

const at::Tensor& RoutedArgs::borrow_held(const at::Tensor& t, bool keep) {
  AliasPool& pool = pool_ != nullptr ? *pool_ : *(pool_ = &tensor::alias_pool());
  const c10::TensorImpl& like = *t.unsafeGetTensorImpl();
  c10::StorageImpl* src = like.unsafe_storage().unsafeGetStorageImpl();
  // One flagos storage twice in a call (x[1:].add_(x[:-1]), torch.mm(x, x,
  // out=x)): the second alias shares the first's storage; one tensor twice
  // (a * a) is one alias twice, as the native call gets one tensor twice.
  // Most calls have a few tensor arguments: a few compares.
  const size_t n = borrowed_.size();
  size_t earlier = kNoEarlier;
  if (C10_LIKELY(n <= kScanBorrows)) {
    for (size_t i = 0; i < n; ++i) {
      if (C10_UNLIKELY(borrowed_[i].src == src && src != nullptr)) {
        earlier = i;
        break;
      }
    }
  } else if (src != nullptr) {
    earlier = indexed_earlier(src);
  }
  if (C10_UNLIKELY(earlier != kNoEarlier)) {
    if (borrowed_[earlier].flagos->unsafeGetTensorImpl() == &like) {
      return borrowed_[earlier].alias;
    }
    return borrow_sharing(t, keep, earlier);
  }
  // Pooled: a plain tensor with storage, not one over a native tensor's own
  // storage (owning_native_deleter: its alias is that native tensor).
  if (C10_UNLIKELY(src == nullptr || src->data_ptr().get_deleter() == &tensor::owning_native_deleter ||
                   !ImplFields::plain(like))) {
    pool.count_unkeyed();
    return borrow_new(t, keep, AliasPool::kNoHome);
  }
  bool shaped = false;
  size_t home = AliasPool::kNoHome;
  // A long call's later borrows (an optimizer's lists) by their position in it.
  at::Tensor alias = C10_LIKELY(n < AliasPool::kKeyedBorrows) ? pool.take(like, AliasPool::key(like), shaped, home)
                                                               : pool.take_at(n, like, shaped, home);
  if (C10_UNLIKELY(!alias.defined())) {
    return borrow_new(t, keep, home);
  }
  const Backing& b = g_backing;
  const c10::DeviceIndex index = like.device().index();
  point_alias(alias.unsafeGetTensorImpl(), like, src, c10::Device(b.type, b.host ? -1 : index), shaped);
  if (C10_UNLIKELY(python_)) {
    tensor::g_python_object_hooks.unpark(alias.unsafeGetTensorImpl());
  }
  note_index(index);
  return hold(t, keep, std::move(alias), home, src);
}

// A new alias (kept in the pool at `home` when released), or the alias of a
// tensor the pool does not take: a native tensor's own storage, a tensor with
// custom or symbolic sizes, or none (tensor::storage_of() raises the tensor's error).
const at::Tensor& RoutedArgs::borrow_new(const at::Tensor& t, bool keep, size_t home) {
  const c10::StorageImpl* src = tensor::storage_of(t);
  at::Tensor alias = tensor::native_alias(t, /*owning=*/false);
  note_index(t.device().index());
  return hold(t, keep, std::move(alias), home, src);
}

size_t RoutedArgs::indexed_earlier(const c10::StorageImpl* src) {
  if (!by_storage_) {
    by_storage_ = std::make_unique<ska::flat_hash_map<const c10::StorageImpl*, size_t>>();
  }
  // Borrows since the last lookup join the index; the first of a storage stays.
  for (const size_t n = borrowed_.size(); indexed_ < n; ++indexed_) {
    if (borrowed_[indexed_].src != nullptr) {
      by_storage_->emplace(borrowed_[indexed_].src, indexed_);
    }
  }
  const auto it = by_storage_->find(src);
  return it == by_storage_->end() ? kNoEarlier : it->second;
}

const at::Tensor& RoutedArgs::borrow_sharing(const at::Tensor& t, bool keep, size_t earlier) {
  const Borrowed& b = borrowed_[earlier];
  const c10::StorageImpl* src = b.src;
  at::Tensor alias = tensor::native_alias_sharing(t, b.alias);
  note_index(t.device().index());
  shares_storage_ = true;
  return hold(t, keep, std::move(alias), AliasPool::kNoHome, src, /*shared=*/true);
}

// The record of a borrow in borrowed_, built in place. SmallVector's
// emplace_back carries its growth path: inlined into a borrow it made the
// borrow too large to inline it in turn, a call of 600 bytes per borrow.
inline const at::Tensor& RoutedArgs::hold(const at::Tensor& t, bool keep, at::Tensor&& alias, size_t home,
                                          const c10::StorageImpl* src, bool shared) {
  if (C10_LIKELY(borrowed_.size() < borrowed_.capacity())) {
    Borrowed* b = ::new (static_cast<void*>(borrowed_.end())) Borrowed(t, keep, std::move(alias), home, src, shared);
    borrowed_.set_size(borrowed_.size() + 1);
    return b->alias;
  }
  return hold_grown(t, keep, std::move(alias), home, src, shared);
}

const at::Tensor& RoutedArgs::hold_grown(const at::Tensor& t, bool keep, at::Tensor&& alias, size_t home,
                                         const c10::StorageImpl* src, bool shared) {
  return borrowed_.emplace_back(t, keep, std::move(alias), home, src, shared).alias;
}

void RoutedArgs::release() {
  AliasPool* pool = pool_;
  const bool python = python_;
  // Last borrow first: an alias sharing an earlier one's storage (never
  // pooled) lets go of it before the earlier one is recycled.
  for (auto it = borrowed_.rbegin(); it != borrowed_.rend(); ++it) {
    Borrowed& b = *it;
    at::Tensor& alias = b.alias;
    auto* impl = alias.unsafeGetTensorImpl();
    c10::StorageImpl* st = b.alias_storage;
    // Recycle only what nothing else references and the kernel left as made.
    // A Python kernel's pool also keeps an alias whose only other holder is
    // its own Python object, which nothing in Python references any more.
    const bool sole = C10_UNLIKELY(python) ? tensor::sole_holder_with_gil(alias) : alias.use_count() == 1;
    if (sole && impl->unsafe_storage().unsafeGetStorageImpl() == st && c10::raw::intrusive_ptr::use_count(st) == 1 &&
        st->data_ptr().get_deleter() == &tensor::borrowed_deleter) {
      // A Python pool's alias waits off the garbage collector's lists, so
      // nothing in Python reaches it and it keeps its geometry: the next
      // borrow of that geometry reshapes nothing (benchmarks/overhead.py
      // measures a FlagGems route's cost around the kernel). If Python could
      // still reach it (a weak reference), it waits as an empty tensor over
      // no memory instead, not a view of bytes that may be freed.
      if (C10_UNLIKELY(python) && !tensor::g_python_object_hooks.park(impl)) {
        st->set_data_ptr_noswap(c10::DataPtr(nullptr, st->device()));
        st->set_nbytes(0);
        impl->set_sizes_contiguous({0});
      }
      // Home, where borrows of the geometry it had find it: a kernel that
      // reshaped the alias (out=) only costs the next borrow from there a
      // reshape.
      pool->give(std::move(alias), b.home);
    } else {
      pool->vacate(b.home);
      alias.reset();
    }
  }
  borrowed_.clear();
  if (C10_UNLIKELY(indexed_ != 0)) {
    by_storage_->clear();
    indexed_ = 0;
  }
}

void RoutedArgs::reserve_exceeded() {
  TORCH_INTERNAL_ASSERT(false, "flagos: RoutedArgs::reserve() left no room for this tensor");
}

void RoutedArgs::note_foreign(const at::Tensor& t, size_t pos) {
  devices_.other(t, index_ >= 0, pos);
  // Tensors of the backing device type that the caller passed in themselves
  // (a CPU tensor on host backing, a CUDA tensor on a GPU): results that are,
  // or view, one of them stay as they are.
  if (t.defined() && t.device().type() == g_backing.type && t.has_storage()) {
    foreign_.push_back(t.storage().unsafeGetStorageImpl());
  }
}

void RoutedArgs::unwrap(torch::jit::Stack* stack, size_t nargs) {
  const size_t base = stack->size() - nargs;
  for (size_t i = base; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (is_flagos(t)) {
        v = borrow_held(t, /*keep=*/true);  // the stack slot holding `t` is overwritten
      } else {
        note_foreign(t, i - base);
      }
    } else if (v.isTensorList()) {
      // The boxed list is this call's own: swap the elements in place.
      auto list = v.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        at::Tensor t = list.get(j);
        if (is_flagos(t)) {
          list.set(j, borrow_held(t, /*keep=*/true));
        } else {
          note_foreign(t, i - base);
        }
      }
    } else if (v.isOptionalTensorList()) {
      auto list = v.toOptionalTensorList();
      c10::List<std::optional<at::Tensor>> out;
      out.reserve(list.size());
      for (std::optional<at::Tensor> t : list) {
        if (t.has_value() && is_flagos(*t)) {
          out.push_back(borrow_held(*t, /*keep=*/true));
        } else {
          if (t.has_value()) {
            devices_.index(*t, index_ >= 0);  // indices: CPU ones mix where the operator takes them
          }
          out.push_back(std::move(t));
        }
      }
      v = std::move(out);
    } else if (v.isDevice()) {
      v = *device_arg(v.toDevice());
    } else if (C10_UNLIKELY(v.isGenerator())) {
      // The backing kernel draws from the backing generator a flagos
      // generator wraps; another device's generator raises, as on CUDA.
      v = runtime::backing_generator(v.toGenerator());
    }
  }
}

void RoutedArgs::restore(torch::jit::Stack* stack, size_t nargs) const {
  // Only the rare _foreach call over several devices comes here (its
  // operators take no device or generator argument, which unwrap() also
  // swaps): a map rather than a scan per tensor, for an optimizer's lists.
  ska::flat_hash_map<const c10::TensorImpl*, const at::Tensor*> caller;
  caller.reserve(borrowed_.size());
  for (const Borrowed& b : borrowed_) {
    caller.emplace(b.alias.unsafeGetTensorImpl(), &*b.flagos);
  }
  auto original = [&](const at::Tensor& t) -> const at::Tensor* {
    const auto it = caller.find(t.unsafeGetTensorImpl());
    return it == caller.end() ? nullptr : it->second;
  };
  for (size_t i = stack->size() - nargs; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isTensor()) {
      if (const at::Tensor* t = original(v.toTensor())) {
        v = *t;
      }
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        if (const at::Tensor* t = original(list.get(j))) {
          list.set(j, *t);
        }
      }
    } else if (v.isOptionalTensorList()) {
      auto list = v.toOptionalTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        const std::optional<at::Tensor> e = list.get(j);
        if (e.has_value()) {
          if (const at::Tensor* t = original(*e)) {
            list.set(j, *t);
          }
        }
      }
    }
  }
}

std::optional<c10::Device> RoutedArgs::device_arg(std::optional<c10::Device> d) {
  if (!d.has_value()) {
    return d;
  }
  to_native_device_ = d->type() != kFlagos;
  if (d->type() != kFlagos) {
    return d;
  }
  // A device argument names where results go (factories, _to_copy): the
  // index a user wrote reaches the core here, so it is checked here.
  if (d->has_index()) {
    runtime::check_device_index(d->index());
    index_ = d->index();
  } else if (g_backing.host) {
    // torch.device("flagos") is the current device, as torch.device("cuda") is (on a GPU the backing
    // kernel allocates there itself), not the device of the call's first flagos tensor.
    index_ = runtime::current_device();
  }
  const Backing& bk = g_backing;
  return c10::Device(bk.type, bk.host ? -1 : d->index());
}

at::Tensor RoutedArgs::unwrap_result(at::Tensor&& r) const {
  if (!r.defined() || r.device().type() != g_backing.type) {
    return std::move(r);  // e.g. CPU results of a CUDA kernel stay CPU
  }
  if (C10_UNLIKELY(!foreign_.empty())) {
    const c10::StorageImpl* st = r.storage().unsafeGetStorageImpl();
    for (const auto* f : foreign_) {
      if (st == f) {
        return std::move(r);
      }
    }
  }
  // In-place and out= return the flagos argument itself. Such a result is one
  // of our aliases, so borrowed_ holds a second reference to it: a fresh
  // result (one reference) skips the scan, which for a _foreach op's list of
  // results would be quadratic in the list's length.
  if (r.use_count() > 1) {
    for (const auto& b : borrowed_) {
      if (r.unsafeGetTensorImpl() == b.alias.unsafeGetTensorImpl()) {
        return *b.flagos;
      }
    }
  }
  // On a GPU the result's own device is right (cross-device copies); host
  // memory has no index, so it comes from the arguments.
  const c10::DeviceIndex target =
      g_backing.host ? (index_ < 0 ? runtime::current_device() : index_) : r.device().index();
  return adopt_result(std::move(r), target, /*gil_held=*/python_);
}

void RoutedArgs::finish(const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  if (schema.is_mutable()) {
    sync_mutated();
  }
  // With an explicit native device argument (_to_copy(x, device="cpu")) the
  // results belong to that device.
  if (C10_LIKELY(!to_native_device_)) {
    const size_t nret = schema.returns().size();
    for (size_t i = stack->size() - nret; i < stack->size(); ++i) {
      c10::IValue& v = (*stack)[i];
      if (v.isTensor()) {
        v = unwrap_result(std::move(v).toTensor());
      } else if (v.isTensorList()) {
        auto list = std::move(v).toTensorList();
        c10::List<at::Tensor> out;
        out.reserve(list.size());
        for (size_t j = 0; j < list.size(); ++j) {
          out.push_back(unwrap_result(list.extract(j)));
        }
        v = std::move(out);
      }
    }
  }
  release();
}

void RoutedArgs::sync_mutated() {
  // Arguments the kernel may have resized or re-pointed (out=, set_, resize_).
  for (const auto& b : borrowed_) {
    if (C10_UNLIKELY(b.shared)) {
      // The earlier borrow of the storage has synced its memory already.
      tensor::sync_back(*b.flagos, b.alias, b.alias_storage, /*memory=*/false);
    } else {
      tensor::sync_back_if_changed(*b.flagos, b.alias, b.alias_storage);
    }
  }
}

}  // namespace route
}  // namespace torch_fl
