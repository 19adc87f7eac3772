// Shared declarations of the torch_fl C++ core.
//
// flagos device i is backed by a native PyTorch device: cuda:i when a GPU is
// used, else host memory (cpu). Everything reaches the backing device through
// c10's generic interfaces (allocator registry, DeviceGuardImpl registry,
// ATen hooks), so no CUDA header is needed to build this.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/SmallVector.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <atomic>
#include <optional>
#include <string>
#include <tuple>

namespace torch_fl {

constexpr c10::DeviceType kFlagos = c10::DeviceType::PrivateUse1;

struct Backing {
  c10::DeviceType type = c10::DeviceType::CPU;
  c10::DispatchKey key = c10::DispatchKey::CPU;
  // The key as a set, made once: routed calls redispatch with it on every call.
  c10::DispatchKeySet keyset{c10::DispatchKey::CPU};
  bool host = true;  // host memory backing (virtual devices)
  c10::DeviceIndex count = 0;
  const c10::impl::DeviceGuardImplInterface* guard = nullptr;
  c10::Allocator* allocator = nullptr;  // the backing device's own allocator
  c10::Allocator* flagos_allocator = nullptr;  // flagos_allocator(), read on every retagged result
  // The dispatch keys of a fresh backing-device tensor, and what they become
  // on flagos (TensorImpl::_change_backend_component_keys, computed once at
  // init): retagging a result is then one compare and one store. The same
  // for a tensor made in inference mode (no autograd keys).
  c10::DispatchKeySet fresh_native_keys;
  c10::DispatchKeySet fresh_flagos_keys;
  c10::DispatchKeySet fresh_native_inference_keys;
  c10::DispatchKeySet fresh_flagos_inference_keys;
  bool initialized = false;
};

// Written once by init(), read on every call afterwards.
extern Backing g_backing;

inline const Backing& backing() {
  return g_backing;
}

// Sets the backing device and registers the device with PyTorch (guard,
// allocator, hooks, operator kernels). Raises on any conflict.
void init(const std::string& backing_type, int64_t host_devices);

// Current flagos device index (thread local, as for CUDA).
c10::DeviceIndex current_device();
void check_device_index(c10::DeviceIndex index);

c10::Allocator* flagos_allocator();
c10::Allocator* host_pinned_allocator();
bool host_is_pinned(const void* ptr);
// Host backing only: counts the bytes of a DataPtr as flagos memory and
// retags it; returns the counted DataPtr.
c10::DataPtr host_adopt(c10::DataPtr&& data, size_t nbytes, c10::DeviceIndex index);

// --- zero-copy aliasing (alias.cpp) ---
// A view of a flagos tensor as a tensor of the backing device over the same
// bytes. `owning` aliases keep the flagos storage alive; borrowed ones are for
// the duration of one kernel call.
at::Tensor native_alias(const at::Tensor& flagos, bool owning);
// A flagos tensor over the bytes of a backing-device tensor (owning).
at::Tensor flagos_alias(const at::Tensor& native, c10::DeviceIndex index);
// A flagos tensor for a fresh kernel result (routed_args.cpp); takes over its memory when the
// result is the only owner, else aliases it. Results that view a flagos
// storage (through a native alias) are mapped back to that storage.
// `gil_held`: the caller holds the GIL (a Python route; routed_args.cpp says why it matters).
at::Tensor adopt_result(at::Tensor&& native, c10::DeviceIndex index, bool gil_held = false);
// Borrowed aliases live for one kernel call; their TensorImpls and
// StorageImpls are recycled per thread through a pool (routed_args.cpp).
class AliasPool;
// The calling thread's pools (a thread-local lookup: once per routed call):
// for the native route, and for Python kernels (with the GIL held).
AliasPool& alias_pool();
AliasPool& python_alias_pool();
// The calling thread's pool's counts so far (`python`: the Python routes'
// pool): borrows, new aliases made, recycled ones reshaped. Tests and
// benchmarks/alias_pool.py.
std::tuple<int64_t, int64_t, int64_t> alias_pool_stats(bool python);
// A Python pool's alias between calls (python_call.cpp; GIL held): park
// takes its Python object, if any, off the garbage collector's lists, so
// that nothing in Python can reach it while it waits and it may keep its
// geometry and its (stale) pointer; false when that cannot be promised (a
// weak reference to the object exists): then the caller empties it instead.
// unpark puts the object back on the collector's lists when it is borrowed
// again, before any Python code sees it.
bool park_python_alias(c10::TensorImpl* alias);
void unpark_python_alias(c10::TensorImpl* alias);
// Fills the backing's fresh_*_keys (init()).
void init_result_keys(Backing& b);
// How an alias's DataPtr says what it is (alias.cpp): borrowed for one call
// (context: the flagos StorageImpl, no reference), owning a flagos storage,
// or a flagos storage owning a native one.
void borrowed_deleter(void*);
void owning_flagos_deleter(void*);
void owning_native_deleter(void*);

// Equal sizes, strides and storage offset. A loop over a few dimensions:
// ArrayRef's operator== calls memcmp, which cost more than the rest of a
// borrow (callgrind, 2026-11-30).
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
// a tensor that has none (a wrapper that must not be unwrapped) still gets
// that check's error.
inline c10::StorageImpl* storage_of(const at::Tensor& t) {
  c10::StorageImpl* st = t.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  return C10_LIKELY(st != nullptr) ? st : t.storage().unsafeGetStorageImpl();
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

// A flagos tensor for a kernel result that adopt_result()'s in-place retag
// does not take (routed_args.cpp has that fast path): one of our aliases
// mapped back, or a wrapper over (or the taken-over memory of) its storage.
at::Tensor adopt_result_slow(at::Tensor&& native, c10::DeviceIndex index);
// Gives `flagos` the storage and geometry the kernel left on its alias (an
// out= argument the kernel resized or re-pointed).
void sync_back(const at::Tensor& flagos, const at::Tensor& alias, c10::StorageImpl* alias_storage);
// sync_back when the alias's storage, data or geometry differs from flagos's.
void sync_back_if_changed(const at::Tensor& flagos, const at::Tensor& alias, c10::StorageImpl* alias_storage);

// Resize a flagos storage to `nbytes`, keeping its contents.
void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes);

// --- registrations done by init() ---
// Registrations live until the process ends, deliberately leaked: a
// torch::Library destroyed during static destruction would deregister from a
// dispatcher that may already be gone (an abort at interpreter exit).
inline torch::Library& new_library(const char* ns, c10::DispatchKey key, const char* file, uint32_t line) {
  return *new torch::Library(torch::Library::IMPL, ns, key, file, line);
}
void register_guard();
void register_hooks();
void register_native_route();
void register_metadata_ops();
void register_autocast_and_sdp();
// flagos's autograd kernels for the typed operators: calls that record nothing
// skip VariableType (autograd_shortcut.cpp).
void register_autograd_shortcut();
// Whether some attention operator has a route of its own: the no-gradient
// shortcut of scaled_dot_product_attention (amp_sdpa.cpp) must not bypass it.
void set_attention_routed(bool routed);
bool is_attention_routed();

// --- one routed call (routed_args.cpp) ---
// Swaps a boxed call's flagos arguments for borrowed native aliases, and
// afterwards turns the results back into flagos tensors (in-place and out=
// results become the caller's own tensors, out= arguments follow resizes).
class RoutedArgs {
 public:
  RoutedArgs() = default;
  // Out of line, so that each operator's typed kernel carries one call rather
  // than the destruction of two small vectors. In the tiny Qwen3 decode this
  // measured the same as inline, within noise (docs/verification.md section 8).
  // Aliases still held (a kernel raised before release()) are dropped and
  // their pool slots freed.
  ~RoutedArgs();
  RoutedArgs(const RoutedArgs&) = delete;
  RoutedArgs& operator=(const RoutedArgs&) = delete;
  // Aliases from `pool` (python_alias_pool() for a Python kernel) instead of
  // the thread's native-route pool.
  explicit RoutedArgs(AliasPool& pool);
  // Boxed calls: every argument and result on the stack.
  void unwrap(std::vector<c10::IValue>* stack, size_t nargs);
  void finish(const c10::FunctionSchema& schema, std::vector<c10::IValue>* stack);
  c10::DeviceIndex index() const {
    return index_;
  }

  // Typed calls (native_typed.cpp), one argument or result at a time, in the
  // same order as the boxed path: arguments, call, sync_mutated (mutable
  // schemas), results, release. `t` must outlive the call unless `keep` (the
  // caller's own arguments do): a tensor only Python holds must not be
  // copied, because the first C++ reference to it takes the GIL (torch's
  // PyObject preservation: refcount 1 -> 2 increfs its PyObject, 2 -> 1
  // decrefs it).
  //
  // The alias is handed out by reference to the copy this object holds (no
  // second reference to count up and down), so that copy must not move:
  // reserve() room for every tensor of the call before the first arg().
  void reserve(size_t tensors) {
    borrowed_.reserve(tensors);
  }
  // Always inlined: left to the compiler, it was one shared function called
  // per argument (callgrind, 2026-12-01: 33 instructions per routed call).
  C10_ALWAYS_INLINE c10::MaybeOwned<at::Tensor> arg(const at::Tensor& t, bool keep = false) {
    if (t.defined() && t.device().type() == kFlagos) {
      return c10::MaybeOwned<at::Tensor>::borrowed(borrow_held_reserved(t, keep));
    }
    note_foreign(t);
    return c10::MaybeOwned<at::Tensor>::borrowed(t);
  }
  // The same for an element of a list the kernel takes by value.
  C10_ALWAYS_INLINE at::Tensor arg_value(const at::Tensor& t, bool keep = false) {
    if (t.defined() && t.device().type() == kFlagos) {
      return borrow_held_reserved(t, keep);
    }
    note_foreign(t);
    return t;
  }
  std::optional<c10::Device> device_arg(std::optional<c10::Device> d);
  at::Tensor result(at::Tensor&& r) const {
    return C10_LIKELY(!to_native_device_) ? unwrap_result(std::move(r)) : std::move(r);
  }
  void sync_mutated();
  void release();

 private:
  struct Borrowed {
    // Built in place in borrowed_ (no temporary to move and destroy).
    Borrowed(const at::Tensor& t, bool keep, at::Tensor&& a, size_t home_slot)
        : flagos(keep ? c10::MaybeOwned<at::Tensor>::owned(std::in_place, t)
                      : c10::MaybeOwned<at::Tensor>::borrowed(t)),
          alias(std::move(a)),
          alias_storage(alias.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl()),
          home(home_slot) {}
    c10::MaybeOwned<at::Tensor> flagos;  // owned where the boxed stack slot is overwritten
    at::Tensor alias;
    c10::StorageImpl* alias_storage;
    size_t home;  // the pool slot the alias returns to (AliasPool::kNoHome: none)
  };
  // Borrows an alias of `t` and returns the copy held in borrowed_.
  const at::Tensor& borrow_held(const at::Tensor& t, bool keep);
  // The rare borrows, out of line: a new alias, or one that is not pooled.
  const at::Tensor& borrow_new(const at::Tensor& t, bool keep, size_t home);
  // Records a borrow (its alias, returned by reference) in borrowed_.
  const at::Tensor& hold(const at::Tensor& t, bool keep, at::Tensor&& alias, size_t home);
  C10_NOINLINE const at::Tensor& hold_grown(const at::Tensor& t, bool keep, at::Tensor&& alias, size_t home);
  // The same where earlier references must stay valid: within reserve().
  // The check's message is built out of line: inline, it kept arg() from
  // being inlined into the typed kernels (a call and ~20 instructions more
  // per borrow).
  C10_ALWAYS_INLINE const at::Tensor& borrow_held_reserved(const at::Tensor& t, bool keep) {
    if (C10_UNLIKELY(borrowed_.size() >= borrowed_.capacity())) {
      reserve_exceeded();
    }
    return borrow_held(t, keep);
  }
  [[noreturn]] C10_NOINLINE static void reserve_exceeded();
  void note_foreign(const at::Tensor& t);
  at::Tensor unwrap_result(at::Tensor&& r) const;

  c10::SmallVector<Borrowed, 6> borrowed_;
  AliasPool* pool_ = nullptr;  // this thread's, looked up at the first borrow
  c10::SmallVector<const c10::StorageImpl*, 4> foreign_;
  c10::DeviceIndex index_ = -1;
  bool to_native_device_ = false;  // a device argument names a non-flagos device
  bool python_ = false;            // aliases from a Python pool (park / unpark their objects)
};

// --- native route state (native_route.cpp) ---
// Calls of one operator on the native route and the CPU fallback. Never freed
// (reset zeroes them), so a kernel may keep the pointer.
struct OpCounts {
  std::atomic<int64_t> native{0};
  std::atomic<int64_t> cpu_fallback{0};
};
OpCounts* op_counts(const c10::OperatorHandle& op);
// One '[flagos dispatch] <overload> -> <label>' line on stderr.
void log_dispatch(const c10::OperatorHandle& op);
// Registers typed native kernels for the operators models call most (before
// the boxed route, which then leaves those operators alone).
void register_typed_native_route(torch::Library& lib);
// True when the native route may own `op` at PrivateUse1: the backing device
// runs it and PyTorch does not decompose it above autograd.
bool native_route_may_own(const c10::OperatorHandle& op);

struct RouteFlags {
  bool log_dispatch = false;
  bool log_fallback = false;
  bool strict = false;
  bool count = true;
};
extern RouteFlags g_route_flags;
// One call of `op` on the native route: its dispatch-log line (when logging
// is on) and its count, from a kernel that found `counts` at registration.
inline void record_native_call(const c10::OperatorHandle& op, OpCounts* counts) {
  const RouteFlags& f = g_route_flags;
  if (C10_UNLIKELY(f.log_dispatch)) {
    log_dispatch(op);
  }
  if (f.count) {
    counts->native.fetch_add(1, std::memory_order_relaxed);
  }
}
// Run an operator's native route or the CPU fallback on a boxed stack,
// bypassing the dispatcher (for Python backends that fall back).
void call_native(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack);
void call_cpu_fallback(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack);
void set_native_label(const std::string& op, const std::string& label);
void set_default_native_label(const std::string& label);
std::vector<std::tuple<std::string, std::string, int64_t>> route_stats();
void reset_route_stats();

// Host memory statistics (host backing only; CUDA backing uses CUDA's).
struct HostMemStats {
  int64_t allocated = 0, peak = 0, allocations = 0, frees = 0;
};
HostMemStats host_memory_stats(c10::DeviceIndex index);
void host_reset_peak(c10::DeviceIndex index);

}  // namespace torch_fl
