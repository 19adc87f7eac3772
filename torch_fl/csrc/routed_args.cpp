// RoutedArgs: one routed call's borrowed aliases and results, and the
// per-thread pool the aliases are recycled through.
//
// This is the per-call path of every route (native_typed.cpp's typed kernels,
// native_route.cpp's boxed kernel, python_call.cpp's Python routes). In a
// model a routed call runs between long stretches of other code (the
// interpreter, the dispatcher, kernel launches) that evict it from the
// instruction cache, so every call fetches its code again: callgrind's cache
// simulation of a tiny Qwen3 decode counted +159 first-level instruction
// misses per routed call beside +1,449 instructions (2026-11-30), the misses
// spread over a dozen small functions in two files. So the path lives in this
// one translation unit, where the pool's helpers inline into the borrow and
// the release, the rare cases (no pooled alias, a result that views an
// argument, one that cannot be retagged) are calls out of line, and a fresh
// result's dispatch keys are retagged with one compare and one store.
#include "flagos.h"

#include <Python.h>

#include <ATen/core/stack.h>
#include <c10/core/InferenceMode.h>

namespace torch_fl {

// ------------------------------------------------------------- field access
// A TensorImpl's fields, read and written directly. Its accessors check the
// sizes policy and the symbolic-shape flag on every call, and its one setter
// of the dispatch keys (_change_backend_component_keys) recomputes them from
// scratch: a borrow made about ten such checked calls, half its instructions
// (callgrind, 2026-12-01). A borrow checks once that the tensor is plain
// (plain()) and reads the fields after that. Pointers to members formed inside
// a derived class reach the protected fields without a cast.
struct ImplFields : c10::TensorImpl {
  // Default sizes and strides, not symbolic: what the fields below assume.
  static bool plain(const c10::TensorImpl& t) {
    return !(t.*(&ImplFields::matches_policy))(SizesStridesPolicy::CustomStrides) && !t.has_symbolic_sizes_strides();
  }
  static const c10::impl::SizesAndStrides& geometry(const c10::TensorImpl& t) {
    return t.*(&ImplFields::sizes_and_strides_);
  }
  static int64_t offset(const c10::TensorImpl& t) {
    return t.*(&ImplFields::storage_offset_);
  }
  static int64_t numel(const c10::TensorImpl& t) {
    return t.*(&ImplFields::numel_);
  }
  static std::optional<c10::Device>& device(c10::TensorImpl& t) {
    return t.*(&ImplFields::device_opt_);
  }
  static c10::DispatchKeySet& keys(c10::TensorImpl& t) {
    return t.*(&ImplFields::key_set_);
  }
};

namespace {

// sole_holder() for a caller that holds the GIL (a Python route's borrows and
// results): it reads the Python object's reference count itself. PyTorch's
// has_unique_reference() takes the GIL again through pybind11 for that read,
// about 130 instructions of thread-state and internals lookups, three times
// per FlagGems-routed call: the two aliases and the result (callgrind, host,
// 2026-12-01: 13,925 instead of 14,365 instructions per routed add).
inline bool sole_holder_with_gil(const at::Tensor& t) {
  const size_t n = t.use_count();
  if (C10_LIKELY(n == 1)) {
    return true;
  }
  PyObject* obj = t.unsafeGetTensorImpl()->pyobj_slot()->load_pyobj();
  return n == 2 && obj != nullptr && Py_REFCNT(obj) == 1;
}

// same_geometry() for two plain tensors.
inline bool same_plain_geometry(const c10::TensorImpl& a, const c10::TensorImpl& b) {
  const c10::impl::SizesAndStrides& x = ImplFields::geometry(a);
  const c10::impl::SizesAndStrides& y = ImplFields::geometry(b);
  const size_t n = x.size();
  if (n != y.size() || ImplFields::offset(a) != ImplFields::offset(b)) {
    return false;
  }
  const int64_t* xs = x.sizes_data();
  const int64_t* ys = y.sizes_data();
  const int64_t* xt = x.strides_data();
  const int64_t* yt = y.strides_data();
  for (size_t i = 0; i < n; ++i) {
    if (xs[i] != ys[i] || xt[i] != yt[i]) {
      return false;
    }
  }
  return true;
}

}  // namespace

// ------------------------------------------------------------------- the pool
// Borrowed aliases live for one kernel call. Their TensorImpl and StorageImpl
// are recycled per thread instead of allocated each call: the per-call cost
// of the native route is mostly these two objects. Recycled aliases are kept
// under a key of their geometry (element count, rank, dtype, offset, outer and
// inner size and stride; the whole geometry is compared before an alias is
// reused as it is), so that a borrow usually finds one whose sizes and
// strides already match: setting them recomputes five contiguity flags, and
// in a model's mix of shapes that was the costliest part of a borrow
// (callgrind, tiny Qwen3 decode, 2026-11-30: two borrows in three reshaped a
// recycled alias).
class AliasPool {
 public:
  // `python`: a pool for the routes that hand aliases to Python kernels
  // (PyRoute), used only with the GIL held. Its aliases keep the Python
  // object a kernel saw (dropping one takes the GIL), so a kernel is handed
  // the same object for the same geometry on the next call instead of a new
  // one: making and freeing two tensor objects per call was most of what a
  // FlagGems route added (callgrind, 2026-11-30). While pooled, their
  // Python objects are off the garbage collector's lists (release(), park),
  // so they keep their geometry like the native pool's aliases.
  explicit AliasPool(bool python) : python_(python) {}
  bool python() const {
    return python_;
  }

  // Where aliases shaped like `t` (plain) are kept: a few numbers that tell a
  // model's shapes apart, not all of them (take() compares the whole
  // geometry anyway).
  static size_t key(const c10::TensorImpl& t) {
    const c10::impl::SizesAndStrides& g = ImplFields::geometry(t);
    const uint64_t dim = g.size();
    const int64_t* sizes = g.sizes_data();
    const int64_t* strides = g.strides_data();
    const uint64_t outer = dim > 0 ? static_cast<uint64_t>(sizes[0]) ^ (static_cast<uint64_t>(strides[0]) << 20) : 0;
    const uint64_t inner =
        dim > 1 ? static_cast<uint64_t>(sizes[dim - 1]) ^ (static_cast<uint64_t>(strides[dim - 1]) << 20) : 0;
    const uint64_t h = (static_cast<uint64_t>(ImplFields::numel(t)) + (dim << 40) +
                        (static_cast<uint64_t>(t.dtype().toScalarType()) << 48) +
                        static_cast<uint64_t>(ImplFields::offset(t))) *
                           0x9E3779B97F4A7C15ull +
                       outer * 0xC2B2AE3D27D4EB4Full + inner * 0x165667B19E3779F9ull;
    return h >> 57;  // the top 7 bits, which mix all of the above: 0 .. kSlots - 1
  }

  // A recycled alias, one last shaped like `like` (plain; key `k`) where
  // there is one (then `shaped` is set); undefined when the pool is empty.
  at::Tensor take(const c10::TensorImpl& like, size_t k, bool& shaped) {
    at::Tensor* slot = &slots_[k];
    for (size_t i = 0; i < kProbe; ++i) {
      if (slot[i].defined() && same_plain_geometry(*slot[i].unsafeGetTensorImpl(), like)) {
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
    return take_spare();
  }

  // Keeps `alias`, shaped as key `k` says, for a later borrow (drops it when
  // the pool is full).
  void give(at::Tensor&& alias, size_t k) {
    at::Tensor* slot = &slots_[k];
    for (size_t i = 0; i < kProbe; ++i) {
      if (!slot[i].defined()) {
        slot[i] = std::move(alias);
        return;
      }
    }
    give_spare(std::move(alias));
  }

 private:
  C10_NOINLINE at::Tensor take_spare() {
    if (spare_.empty()) {
      return {};  // a new alias, kept under its key afterwards
    }
    at::Tensor alias = std::move(spare_.back());
    spare_.pop_back();
    return alias;
  }
  C10_NOINLINE void give_spare(at::Tensor&& alias) {
    if (spare_.size() < kSpare) {
      spare_.push_back(std::move(alias));
    }
  }

  static constexpr size_t kSlots = 128;  // a decode step of Qwen3 borrows ~40 distinct geometries
  static constexpr size_t kProbe = 2;    // two arguments of one shape in one call
  static constexpr size_t kSpare = 16;
  at::Tensor slots_[kSlots + kProbe - 1];
  c10::SmallVector<at::Tensor, kSpare> spare_;  // when a key's slots are full
  bool python_;
};

namespace {

// Leaked per thread on purpose: tensors must not be destroyed during thread or
// process teardown, when the allocator behind them may already be gone. A
// plain pointer, set on first use: a thread_local with a dynamic initialiser
// would run its guard on every access.
thread_local AliasPool* thread_alias_pool = nullptr;
thread_local AliasPool* thread_python_alias_pool = nullptr;

C10_NOINLINE AliasPool* new_pool(AliasPool*& slot, bool python) {
  return slot = new AliasPool(python);
}

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
  data = c10::DataPtr(src->mutable_data(), src, &borrowed_deleter, device);
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

// A fresh backing-device result retagged as flagos in place: its memory, its
// cached device and its dispatch keys.
void retag(c10::TensorImpl* impl, c10::StorageImpl* src, c10::DeviceIndex index) {
  const Backing& b = g_backing;
  const c10::Device device(kFlagos, index);
  if (b.host) {
    src->set_data_ptr_noswap(host_adopt(src->set_data_ptr(c10::DataPtr(nullptr, src->device())), src->nbytes(), index));
  } else {
    src->mutable_data_ptr().unsafe_set_device(device);
  }
  src->set_allocator(b.flagos_allocator);
  ImplFields::device(*impl) = device;  // what set_storage_keep_dtype() would read back from the storage
  c10::DispatchKeySet& keys = ImplFields::keys(*impl);
  if (C10_LIKELY(keys == b.fresh_native_keys)) {
    keys = b.fresh_flagos_keys;  // what _change_backend_component_keys makes of them (init)
  } else if (keys == b.fresh_native_inference_keys) {
    keys = b.fresh_flagos_inference_keys;
  } else {
    impl->_change_backend_component_keys(device);
  }
}

}  // namespace

AliasPool& alias_pool() {
  AliasPool* pool = thread_alias_pool;
  return C10_LIKELY(pool != nullptr) ? *pool : *new_pool(thread_alias_pool, /*python=*/false);
}

AliasPool& python_alias_pool() {
  AliasPool* pool = thread_python_alias_pool;
  return C10_LIKELY(pool != nullptr) ? *pool : *new_pool(thread_python_alias_pool, /*python=*/true);
}

void init_result_keys(Backing& b) {
  // A tensor as a backing-device kernel makes its results, outside inference
  // mode and in it (where TensorImpl leaves out the autograd keys), retagged
  // the way adopt_result() does for other key sets.
  for (const bool inference : {false, true}) {
    c10::InferenceMode mode(inference);
    auto probe = c10::make_intrusive<c10::TensorImpl>(c10::DispatchKeySet(b.key), caffe2::TypeMeta::Make<float>(),
                                                      c10::Device(b.type, b.host ? -1 : 0));
    (inference ? b.fresh_native_inference_keys : b.fresh_native_keys) = probe->key_set();
    probe->_change_backend_component_keys(c10::Device(kFlagos, 0));
    (inference ? b.fresh_flagos_inference_keys : b.fresh_flagos_keys) = probe->key_set();
  }
}

at::Tensor adopt_result(at::Tensor&& native, c10::DeviceIndex index, bool gil_held) {
  c10::StorageImpl* src = storage_of(native);
  auto* impl = native.unsafeGetTensorImpl();
  const auto deleter = src->data_ptr().get_deleter();
  // A fresh result that nothing else holds (not a view of one of our aliases,
  // whose deleter says so): turn it into a flagos tensor in place rather than
  // wrapping it. Whoever else holds the tensor or its storage would see the
  // change: those results are wrapped.
  if (C10_LIKELY(deleter != &borrowed_deleter && deleter != &owning_flagos_deleter &&
                 (C10_UNLIKELY(gil_held) ? sole_holder_with_gil(native) : sole_holder(native)) &&
                 c10::raw::intrusive_ptr::use_count(src) == 1 && impl->allow_tensor_metadata_change())) {
    retag(impl, src, index);
    return std::move(native);
  }
  return adopt_result_slow(std::move(native), index);
}

// ----------------------------------------------------------------- RoutedArgs
RoutedArgs::RoutedArgs(AliasPool& pool) : pool_(&pool), python_(pool.python()) {}

RoutedArgs::~RoutedArgs() = default;

const at::Tensor& RoutedArgs::borrow_held(const at::Tensor& t, bool keep) {
  AliasPool& pool = pool_ != nullptr ? *pool_ : *(pool_ = &alias_pool());
  const c10::TensorImpl& like = *t.unsafeGetTensorImpl();
  c10::StorageImpl* src = like.unsafe_storage().unsafeGetStorageImpl();
  // Pooled: a plain tensor with storage, not one over a native tensor's own
  // storage (owning_native_deleter: its alias is that native tensor).
  if (C10_UNLIKELY(src == nullptr || src->data_ptr().get_deleter() == &owning_native_deleter ||
                   !ImplFields::plain(like))) {
    return borrow_new(t, keep, /*key=*/0);
  }
  const size_t key = AliasPool::key(like);
  bool shaped = false;
  at::Tensor alias = pool.take(like, key, shaped);
  if (C10_UNLIKELY(!alias.defined())) {
    return borrow_new(t, keep, key);
  }
  const Backing& b = g_backing;
  const c10::DeviceIndex index = like.device().index();
  point_alias(alias.unsafeGetTensorImpl(), like, src, c10::Device(b.type, b.host ? -1 : index), shaped);
  if (C10_UNLIKELY(python_)) {
    unpark_python_alias(alias.unsafeGetTensorImpl());
  }
  if (index_ < 0) {
    index_ = index;
  }
  return borrowed_.emplace_back(t, keep, std::move(alias), key).alias;
}

// A new alias (kept in the pool under `key` when released), or the alias of a
// tensor the pool does not take: a native tensor's own storage, a tensor with
// custom or symbolic sizes, or none (storage_of() raises the tensor's error).
const at::Tensor& RoutedArgs::borrow_new(const at::Tensor& t, bool keep, size_t key) {
  (void)storage_of(t);
  at::Tensor alias = native_alias(t, /*owning=*/false);
  if (index_ < 0) {
    index_ = t.device().index();
  }
  return borrowed_.emplace_back(t, keep, std::move(alias), key).alias;
}

void RoutedArgs::release() {
  AliasPool* pool = pool_;
  const bool python = python_;
  for (auto& b : borrowed_) {
    at::Tensor& alias = b.alias;
    auto* impl = alias.unsafeGetTensorImpl();
    c10::StorageImpl* st = b.alias_storage;
    // Recycle only what nothing else references and the kernel left as made.
    // A Python kernel's pool also keeps an alias whose only other holder is
    // its own Python object, which nothing in Python references any more.
    const bool sole = C10_UNLIKELY(python) ? sole_holder_with_gil(alias) : alias.use_count() == 1;
    if (sole && impl->unsafe_storage().unsafeGetStorageImpl() == st && c10::raw::intrusive_ptr::use_count(st) == 1 &&
        st->data_ptr().get_deleter() == &borrowed_deleter) {
      // A Python pool's alias waits off the garbage collector's lists, so
      // nothing in Python reaches it and it keeps its geometry: the next
      // borrow of that geometry reshapes nothing (emptying it and reshaping
      // it again was a third of what a FlagGems route added around the
      // kernel, H200, 2026-12-01). If Python could still reach it (a weak
      // reference), it waits as an empty tensor over no memory instead, not
      // a view of bytes that may be freed.
      if (C10_UNLIKELY(python) && !park_python_alias(impl)) {
        st->set_data_ptr_noswap(c10::DataPtr(nullptr, st->device()));
        st->set_nbytes(0);
        impl->set_sizes_contiguous({0});
      }
      // The key of the geometry set at the borrow: a kernel that reshaped the
      // alias only costs the next borrow from that slot a reshape.
      pool->give(std::move(alias), b.pool_key);
    }
  }
  borrowed_.clear();
}

void RoutedArgs::note_foreign(const at::Tensor& t) {
  // Tensors of the backing device type that the caller passed in themselves
  // (a CPU tensor on host backing, a CUDA tensor on a GPU): results that are,
  // or view, one of them stay as they are.
  if (t.defined() && t.device().type() == g_backing.type && t.has_storage()) {
    foreign_.push_back(t.storage().unsafeGetStorageImpl());
  }
}

void RoutedArgs::unwrap(torch::jit::Stack* stack, size_t nargs) {
  for (size_t i = stack->size() - nargs; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (is_flagos(t)) {
        v = borrow_held(t, /*keep=*/true);  // the stack slot holding `t` is overwritten
      } else {
        note_foreign(t);
      }
    } else if (v.isTensorList()) {
      // The boxed list is this call's own: swap the elements in place.
      auto list = v.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        at::Tensor t = list.get(j);
        if (is_flagos(t)) {
          list.set(j, borrow_held(t, /*keep=*/true));
        } else {
          note_foreign(t);
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
          out.push_back(std::move(t));
        }
      }
      v = std::move(out);
    } else if (v.isDevice()) {
      v = *device_arg(v.toDevice());
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
  // A device argument names where results go (factories, _to_copy).
  if (d->has_index()) {
    index_ = d->index();
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
  const c10::DeviceIndex target = g_backing.host ? (index_ < 0 ? current_device() : index_) : r.device().index();
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
    sync_back_if_changed(*b.flagos, b.alias, b.alias_storage);
  }
}

}  // namespace torch_fl
