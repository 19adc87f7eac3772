// RoutedArgs: one routed call's borrowed aliases and results.
//
// The per-call path of every route: the typed native kernels
// (route/typed_native.cpp), the boxed native route (route/native_route.cpp),
// the SDPA shortcut (ops/sdpa.cpp) and the Python routes (python/). Its code
// (route/routed_args.cpp, with the alias pool of tensor/alias_pool.h inlined
// into it) is compiled in one translation unit with the native kernels that
// call it (route/unity_route.cpp): a routed call runs between long stretches of
// other code that evict it from the instruction cache, so its code should be
// few functions close together, with the rare cases out of line.
// benchmarks/route_instructions.py counts what it adds per call.
#pragma once

#include "route/device_check.h"
#include "runtime/device.h"
#include "tensor/alias_pool.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/function_schema.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/flat_hash_map.h>
#include <c10/util/SmallVector.h>

#include <memory>
#include <optional>
#include <vector>

namespace torch_fl {
namespace route {

// Swaps a call's flagos arguments for borrowed native aliases, and afterwards
// turns the results back into flagos tensors (in-place and out= results become
// the caller's own tensors, out= arguments follow resizes).
class RoutedArgs {
 public:
  RoutedArgs() = default;
  // Out of line, so that each operator's typed kernel carries one call rather
  // than the destruction of two small vectors. Aliases still held (a kernel
  // raised before release()) are dropped and their pool slots freed.
  ~RoutedArgs();
  RoutedArgs(const RoutedArgs&) = delete;
  RoutedArgs& operator=(const RoutedArgs&) = delete;
  // Aliases from `pool` (tensor::python_alias_pool() for a Python kernel)
  // instead of the thread's native-route pool.
  explicit RoutedArgs(tensor::AliasPool& pool);
  // Boxed calls: every argument and result on the stack.
  void unwrap(std::vector<c10::IValue>* stack, size_t nargs);
  // After the arguments are unwrapped (boxed or typed), before the kernel
  // runs: raises PyTorch's device-mismatch error where they are on two
  // devices and `op` may not mix them (route/device_check.h). Every route
  // calls it. True: a _foreach call over several devices, which the route
  // runs with run_foreach_per_element() on the caller's tensors (restore()
  // puts them back on a boxed stack) instead of its kernel.
  [[nodiscard]] C10_ALWAYS_INLINE bool check_devices(const c10::OperatorHandle& op) const {
    return devices_.check(op, index_);
  }
  // Undoes unwrap(): the caller's flagos tensors where their aliases stand.
  void restore(std::vector<c10::IValue>* stack, size_t nargs) const;
  // Two arguments of the call are over one flagos storage (their aliases
  // share a storage): the routes whose kernel is not PyTorch's then check
  // written arguments against the others (route/overlap_check.h).
  bool shares_storage() const {
    return shares_storage_;
  }
  void finish(const c10::FunctionSchema& schema, std::vector<c10::IValue>* stack);
  c10::DeviceIndex index() const {
    return index_;
  }
  // A device argument names a native device: the results are that device's (_to_copy(x, device="cpu")).
  bool to_native_device() const {
    return to_native_device_;
  }

  // Typed calls (route/typed_native.cpp, python/typed_fronts.cpp), one
  // argument or result at a time, in the same order as the boxed path:
  // arguments, call, sync_mutated (mutable schemas), results, release. `t` must outlive the call unless `keep` (the
  // caller's own arguments do): a tensor only Python holds must not be
  // copied, because the first C++ reference to it takes the GIL (torch's
  // PyObject preservation: refcount 1 -> 2 increfs its PyObject, 2 -> 1
  // decrefs it).
  //
  // The alias is handed out by reference to the copy this object holds (no
  // second reference to count up and down), so that copy must not move:
  // reserve() room for every tensor of the call before the first arg().
  // `pos` is the argument's position in the operator's schema (that of the
  // list for an element): the device check tells the arguments an operator
  // writes from its inputs by it. Only a tensor of another device reads it.
  void reserve(size_t tensors) {
    borrowed_.reserve(tensors);
  }
  // Always inlined: left to the compiler, it becomes one shared function
  // called per argument (benchmarks/route_instructions.py counts the call).
  C10_ALWAYS_INLINE c10::MaybeOwned<at::Tensor> arg(const at::Tensor& t, size_t pos, bool keep = false) {
    if (t.defined() && t.device().type() == kFlagos) {
      return c10::MaybeOwned<at::Tensor>::borrowed(borrow_held_reserved(t, keep));
    }
    note_foreign(t, pos);
    return c10::MaybeOwned<at::Tensor>::borrowed(t);
  }
  // The same for an element of a list the kernel takes by value.
  C10_ALWAYS_INLINE at::Tensor arg_value(const at::Tensor& t, size_t pos, bool keep = false) {
    if (t.defined() && t.device().type() == kFlagos) {
      return borrow_held_reserved(t, keep);
    }
    note_foreign(t, pos);
    return t;
  }
  // The same for an element of a Tensor?[] argument (an indexing operator's
  // indices), whose CPU tensors the device check tells apart.
  C10_ALWAYS_INLINE at::Tensor index_value(const at::Tensor& t, bool keep = false) {
    if (t.defined() && t.device().type() == kFlagos) {
      return borrow_held_reserved(t, keep);
    }
    devices_.index(t, index_ >= 0);
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
    Borrowed(const at::Tensor& t, bool keep, at::Tensor&& a, size_t home_slot, const c10::StorageImpl* flagos_storage,
             bool shares)
        : flagos(keep ? c10::MaybeOwned<at::Tensor>::owned(std::in_place, t)
                      : c10::MaybeOwned<at::Tensor>::borrowed(t)),
          alias(std::move(a)),
          alias_storage(alias.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl()),
          src(flagos_storage),
          home(home_slot),
          shared(shares) {}
    c10::MaybeOwned<at::Tensor> flagos;  // owned where the boxed stack slot is overwritten
    at::Tensor alias;
    c10::StorageImpl* alias_storage;
    const c10::StorageImpl* src;  // the flagos storage the alias is over
    size_t home;                  // the pool slot the alias returns to (tensor::AliasPool::kNoHome: none)
    bool shared;                  // alias_storage is an earlier borrow's (one flagos storage, twice in the call)
  };
  // Borrows an alias of `t` and returns the copy held in borrowed_.
  const at::Tensor& borrow_held(const at::Tensor& t, bool keep);
  // The first borrow over flagos storage `src` (an index into borrowed_), or
  // kNoEarlier. A call's first kScanBorrows borrows are scanned; past them
  // (a _foreach op's lists: AdamW's hold every parameter) an index answers,
  // or each borrow's scan would make the call quadratic in the lists' length.
  static constexpr size_t kScanBorrows = 16;
  static constexpr size_t kNoEarlier = static_cast<size_t>(-1);
  C10_NOINLINE size_t indexed_earlier(const c10::StorageImpl* src);
  // The rare borrows, out of line: a new alias, or one that is not pooled.
  const at::Tensor& borrow_new(const at::Tensor& t, bool keep, size_t home);
  // A second argument over the storage of an earlier one (`earlier`, an index
  // into borrowed_): its alias shares that borrow's alias storage, so that the
  // kernel sees the two overlap as a native call would (PyTorch's overlap
  // checks and the kernels that copy an aliased input compare storages).
  C10_NOINLINE const at::Tensor& borrow_sharing(const at::Tensor& t, bool keep, size_t earlier);
  // Records a borrow (its alias, returned by reference) in borrowed_.
  const at::Tensor& hold(const at::Tensor& t, bool keep, at::Tensor&& alias, size_t home,
                         const c10::StorageImpl* src, bool shared = false);
  C10_NOINLINE const at::Tensor& hold_grown(const at::Tensor& t, bool keep, at::Tensor&& alias, size_t home,
                                            const c10::StorageImpl* src, bool shared);
  // The same where earlier references must stay valid: within reserve().
  // The check's message is built out of line: inline, it keeps arg() from
  // being inlined into the typed kernels (a call more per borrow).
  C10_ALWAYS_INLINE const at::Tensor& borrow_held_reserved(const at::Tensor& t, bool keep) {
    if (C10_UNLIKELY(borrowed_.size() >= borrowed_.capacity())) {
      reserve_exceeded();
    }
    return borrow_held(t, keep);
  }
  [[noreturn]] C10_NOINLINE static void reserve_exceeded();
  void note_foreign(const at::Tensor& t, size_t pos);
  // The index of a flagos argument, the first one's (index_) or compared with it.
  C10_ALWAYS_INLINE void note_index(c10::DeviceIndex index) {
    if (index_ < 0) {
      index_ = index;
    } else {
      devices_.flagos(index_, index);
    }
  }
  at::Tensor unwrap_result(at::Tensor&& r) const;

  c10::SmallVector<Borrowed, 6> borrowed_;
  // borrowed_[0, indexed_) by flagos storage (first borrow of each), built
  // by indexed_earlier() once a call has more than kScanBorrows borrows.
  std::unique_ptr<ska::flat_hash_map<const c10::StorageImpl*, size_t>> by_storage_;
  size_t indexed_ = 0;
  tensor::AliasPool* pool_ = nullptr;  // this thread's, looked up at the first borrow
  c10::SmallVector<const c10::StorageImpl*, 4> foreign_;
  DeviceCheck devices_;
  c10::DeviceIndex index_ = -1;
  bool to_native_device_ = false;  // a device argument names a non-flagos device
  bool python_ = false;            // aliases from a Python pool (park / unpark their objects)
  bool shares_storage_ = false;    // a borrow shares an earlier one's alias storage
};

// A flagos tensor for a fresh kernel result: takes over its memory when the
// result is the only owner (retagged in place), else aliases it. Results that
// view a flagos storage (through a native alias) are mapped back to that
// storage. `gil_held`: the caller holds the GIL (a Python route), so a
// result's own Python object may be its other holder.
at::Tensor adopt_result(at::Tensor&& native, c10::DeviceIndex index, bool gil_held = false);

}  // namespace route
}  // namespace torch_fl
