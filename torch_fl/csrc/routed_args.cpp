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
// of the native route is mostly these two objects. A recycled alias keeps the
// geometry it last had, so a borrow should find one whose sizes and strides
// already match: setting them recomputes five contiguity flags, the costliest
// part of a borrow that misses.
//
// Each alias has a home slot, found from a hash of its whole geometry, and
// goes back to it after the call. A borrow looks in the four slots from its
// hash for an alias of its geometry; if none is there it makes a new alias in
// a free slot of those four, and only when all four are taken does it reshape
// one: the one borrowed longest ago, never one out on this call's borrows. The
// earlier pool (128 slots, two probed, a hash of the outer and inner
// dimensions only, a miss reshaping whatever it found) kept one alias where
// geometries that differ only in their middle dimensions (a transposed head
// layout) met, so they took it from each other on every use. In a replay of
// Qwen3-0.6B's operators (four layers, the geometries of e2e.py's prefill and
// of a 200-token decode), 14 % of a prefill's borrows and 22 % of a decode's
// reshaped an alias; with home slots 0 % and 0.8 % (decode's growing cache
// length keeps making new geometries), also in a pool other shapes filled
// first. Host callgrind, tiny Qwen3 prefill: ~100 instructions and 14 % of
// the added instruction-cache misses fewer per routed call.
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

  // No home slot: an alias of a tensor the pool does not key (not plain), or
  // one borrowed while every slot of its key was out.
  static constexpr size_t kNoHome = SIZE_MAX;

  // The first slot where aliases shaped like `t` (plain) live: a hash of its
  // dtype, element count, offset and every size and stride.
  static size_t key(const c10::TensorImpl& t) {
    const c10::impl::SizesAndStrides& g = ImplFields::geometry(t);
    const size_t dim = g.size();
    const int64_t* sizes = g.sizes_data();
    const int64_t* strides = g.strides_data();
    uint64_t h = (static_cast<uint64_t>(ImplFields::numel(t)) + (static_cast<uint64_t>(dim) << 40) +
                  (static_cast<uint64_t>(t.dtype().toScalarType()) << 48) +
                  static_cast<uint64_t>(ImplFields::offset(t))) *
                 0x9E3779B97F4A7C15ull;
    // One multiply per dimension (the chain of multiplies is the hash's
    // latency), a size and its stride shifted apart into one word: a
    // collision only costs a probe, since the slot's geometry is compared
    // in full.
    for (size_t i = 0; i < dim; ++i) {
      h = (h ^ static_cast<uint64_t>(sizes[i]) ^ (static_cast<uint64_t>(strides[i]) << 29)) * 0xC2B2AE3D27D4EB4Full;
    }
    return h >> (64 - kSlotBits);  // the top bits, which mix all of the above
  }

  // An alias for a borrow of `like` (plain; key `k`) and its `home` slot:
  // one last shaped like `like` (then `shaped` is set) where there is one,
  // else undefined (make a new one, home or kNoHome) or another to reshape.
  at::Tensor take(const c10::TensorImpl& like, size_t k, bool& shaped, size_t& home) {
    for (size_t j = k; j < k + kProbe; ++j) {
      Slot& s = slots_[j];
      if (s.alias.defined() && same_plain_geometry(*s.alias.unsafeGetTensorImpl(), like)) {
        shaped = true;
        home = j;
        s.out = true;
        s.used = static_cast<uint32_t>(++borrows_);
        return std::move(s.alias);
      }
    }
    return take_miss(k, shaped, home);
  }

  // Brings a borrowed alias home after the call (or keeps it spare).
  void give(at::Tensor&& alias, size_t home) {
    if (C10_LIKELY(home != kNoHome)) {
      slots_[home].alias = std::move(alias);
      slots_[home].out = false;
      return;
    }
    give_spare(std::move(alias));
  }

  // The alias borrowed from `home` does not come back (something else still
  // holds it, or the kernel raised): the slot is free for a new one.
  void vacate(size_t home) {
    if (home != kNoHome) {
      slots_[home].out = false;
    }
  }

  // Counts since the pool was made, for tests and diagnostics: borrows, and
  // the misses among them (new aliases made, recycled ones reshaped).
  uint64_t borrows() const {
    return borrows_;
  }
  int64_t made() const {
    return made_;
  }
  int64_t reshaped() const {
    return reshaped_;
  }
  // A borrow of a tensor the pool does not key (not plain): always a new alias.
  C10_NOINLINE void count_unkeyed() {
    ++borrows_;
    ++made_;
  }

 private:
  C10_NOINLINE at::Tensor take_miss(size_t k, bool& shaped, size_t& home) {
    shaped = false;
    if (python_) {
      // An alias emptied at its last release (a weak reference to its Python
      // object kept it from being parked) comes back to the geometry it was
      // borrowed for: the kernel keeps getting one object for it.
      for (size_t j = k; j < k + kProbe; ++j) {
        if (slots_[j].alias.defined() && ImplFields::numel(*slots_[j].alias.unsafeGetTensorImpl()) == 0) {
          return reuse(j, home);
        }
      }
    }
    for (size_t j = k; j < k + kProbe; ++j) {
      if (!slots_[j].alias.defined() && !slots_[j].out) {
        home = j;  // a new alias, which will live here
        slots_[j].out = true;
        slots_[j].used = static_cast<uint32_t>(++borrows_);
        ++made_;
        return {};
      }
    }
    // The alias borrowed longest ago: one of a geometry no longer used (a
    // decode's shorter cache lengths), not one the model still borrows.
    size_t oldest = kNoHome;
    uint32_t oldest_age = 0;
    for (size_t j = k; j < k + kProbe; ++j) {
      // Ages by unsigned difference from now: right across the clock's wrap.
      const uint32_t age = static_cast<uint32_t>(borrows_) - slots_[j].used;
      if (slots_[j].alias.defined() && (oldest == kNoHome || age > oldest_age)) {
        oldest = j;
        oldest_age = age;
      }
    }
    if (oldest != kNoHome) {
      return reuse(oldest, home);
    }
    home = kNoHome;  // every slot of the key is out on this call's other borrows
    ++borrows_;
    if (spare_.empty()) {
      ++made_;
      return {};
    }
    ++reshaped_;
    at::Tensor alias = std::move(spare_.back());
    spare_.pop_back();
    return alias;
  }
  // The alias at slot `j`, to be reshaped for another geometry.
  at::Tensor reuse(size_t j, size_t& home) {
    home = j;
    slots_[j].out = true;
    slots_[j].used = static_cast<uint32_t>(++borrows_);
    ++reshaped_;
    return std::move(slots_[j].alias);
  }
  C10_NOINLINE void give_spare(at::Tensor&& alias) {
    if (spare_.size() < kSpare) {
      spare_.push_back(std::move(alias));
    }
  }

  // 256 slots: a layer of Qwen3-0.6B borrows ~45 distinct geometries; decode
  // adds a few per token as its cache grows, which then take the slots of
  // geometries no longer used.
  static constexpr size_t kSlotBits = 8;
  static constexpr size_t kSlots = size_t{1} << kSlotBits;
  static constexpr size_t kProbe = 4;  // slots per key: q, k and v of one shape in one call
  static constexpr size_t kSpare = 16;
  // A slot in 16 bytes, so that the four a key probes span one or two cache
  // lines (separate arrays of aliases, flags and times took three or more).
  struct Slot {
    at::Tensor alias;
    uint32_t used = 0;  // when its alias was last borrowed (the low bits of borrows_ then)
    bool out = false;   // its alias is out on a borrow and comes back here
  };
  static_assert(sizeof(Slot) == 16);
  alignas(64) Slot slots_[kSlots + kProbe - 1];
  uint64_t borrows_ = 0;  // every borrow: the clock of Slot::used
  c10::SmallVector<at::Tensor, kSpare> spare_;  // aliases without a home: a list's many tensors of one shape
  int64_t made_ = 0;
  int64_t reshaped_ = 0;
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

// Host backing's part of a retag, out of line: its byte accounting is most of
// the code, and on a GPU it only lengthened the retag the GPU runs.
C10_NOINLINE void retag_host_memory(c10::StorageImpl* src, c10::DeviceIndex index) {
  src->set_data_ptr_noswap(host_adopt(src->set_data_ptr(c10::DataPtr(nullptr, src->device())), src->nbytes(), index));
}

// A fresh backing-device result retagged as flagos in place: its memory, its
// cached device and its dispatch keys.
void retag(c10::TensorImpl* impl, c10::StorageImpl* src, c10::DeviceIndex index) {
  const Backing& b = g_backing;
  const c10::Device device(kFlagos, index);
  if (C10_UNLIKELY(b.host)) {
    retag_host_memory(src, index);
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

std::tuple<int64_t, int64_t, int64_t> alias_pool_stats(bool python) {
  const AliasPool& pool = python ? python_alias_pool() : alias_pool();
  return {static_cast<int64_t>(pool.borrows()), pool.made(), pool.reshaped()};
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

RoutedArgs::~RoutedArgs() {
  // release() empties borrowed_; aliases left here are those of a kernel that
  // raised: they are dropped, and their slots freed.
  for (const auto& b : borrowed_) {
    pool_->vacate(b.home);
  }
}

const at::Tensor& RoutedArgs::borrow_held(const at::Tensor& t, bool keep) {
  AliasPool& pool = pool_ != nullptr ? *pool_ : *(pool_ = &alias_pool());
  const c10::TensorImpl& like = *t.unsafeGetTensorImpl();
  c10::StorageImpl* src = like.unsafe_storage().unsafeGetStorageImpl();
  // Pooled: a plain tensor with storage, not one over a native tensor's own
  // storage (owning_native_deleter: its alias is that native tensor).
  if (C10_UNLIKELY(src == nullptr || src->data_ptr().get_deleter() == &owning_native_deleter ||
                   !ImplFields::plain(like))) {
    pool.count_unkeyed();
    return borrow_new(t, keep, AliasPool::kNoHome);
  }
  const size_t key = AliasPool::key(like);
  bool shaped = false;
  size_t home = AliasPool::kNoHome;
  at::Tensor alias = pool.take(like, key, shaped, home);
  if (C10_UNLIKELY(!alias.defined())) {
    return borrow_new(t, keep, home);
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
  return hold(t, keep, std::move(alias), home);
}

// A new alias (kept in the pool at `home` when released), or the alias of a
// tensor the pool does not take: a native tensor's own storage, a tensor with
// custom or symbolic sizes, or none (storage_of() raises the tensor's error).
const at::Tensor& RoutedArgs::borrow_new(const at::Tensor& t, bool keep, size_t home) {
  (void)storage_of(t);
  at::Tensor alias = native_alias(t, /*owning=*/false);
  if (index_ < 0) {
    index_ = t.device().index();
  }
  return hold(t, keep, std::move(alias), home);
}

// The record of a borrow in borrowed_, built in place. SmallVector's
// emplace_back carries its growth path: inlined into a borrow it made the
// borrow too large to inline it in turn, a call of 600 bytes per borrow.
inline const at::Tensor& RoutedArgs::hold(const at::Tensor& t, bool keep, at::Tensor&& alias, size_t home) {
  if (C10_LIKELY(borrowed_.size() < borrowed_.capacity())) {
    Borrowed* b = ::new (static_cast<void*>(borrowed_.end())) Borrowed(t, keep, std::move(alias), home);
    borrowed_.set_size(borrowed_.size() + 1);
    return b->alias;
  }
  return hold_grown(t, keep, std::move(alias), home);
}

const at::Tensor& RoutedArgs::hold_grown(const at::Tensor& t, bool keep, at::Tensor&& alias, size_t home) {
  return borrowed_.emplace_back(t, keep, std::move(alias), home).alias;
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
      // Home, where borrows of the geometry it had find it: a kernel that
      // reshaped the alias (out=) only costs the next borrow from there a
      // reshape.
      pool->give(std::move(alias), b.home);
    } else {
      pool->vacate(b.home);
    }
  }
  borrowed_.clear();
}

void RoutedArgs::reserve_exceeded() {
  TORCH_INTERNAL_ASSERT(false, "flagos: RoutedArgs::reserve() left no room for this tensor");
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
