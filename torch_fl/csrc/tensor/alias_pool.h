// The alias pool: borrowed aliases live for one kernel call, and their
// TensorImpl and StorageImpl are recycled per thread instead of allocated on
// each call (the per-call cost of the native route is mostly these two
// objects).
//
// A recycled alias keeps the geometry it last had, so a borrow should find one
// whose sizes and strides already match: setting them recomputes five
// contiguity flags, the costliest part of a borrow that misses. Each alias has
// a home slot, found from a hash of its whole geometry (dtype, element count,
// offset, every size and stride), and goes back to it after the call. A borrow
// looks in the kProbe slots from its hash for an alias of its geometry; if none
// is there it makes a new alias in a free slot of those, and only when all are
// taken does it reshape one: the one borrowed longest ago, never one out on
// this call's borrows. Geometries that differ only in their middle dimensions
// (a transposed head layout) so get slots of their own instead of taking one
// alias from each other on every use. benchmarks/alias_pool.py counts the
// misses of a model's repeated forward (torch_fl._C._alias_pool_stats).
//
// A long call (a _foreach operator's or a fused optimizer's lists: AdamW's
// hold four tensors per parameter) would take every slot of its keys and
// make a new alias for each tensor beyond them. Its borrows past the first
// kKeyedBorrows are pooled by their position in the call instead (take_at):
// the next optimizer step brings the same geometry to the same position, and
// a position that meets another geometry reshapes its alias, never makes one.
//
// Header-only: the per-call path (route/routed_args.cpp) inlines the pool's
// helpers, and the thread's pool lookup, into its borrow and release.
#pragma once

#include "tensor/impl_fields.h"

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace torch_fl {
namespace tensor {

class AliasPool {
 public:
  // `python`: a pool for the routes that hand aliases to Python kernels
  // (PyRoute), used only with the GIL held. Its aliases keep the Python
  // object a kernel saw (dropping one takes the GIL), so a kernel is handed
  // the same object for the same geometry on the next call instead of making
  // and freeing a tensor object per argument. While pooled, their Python
  // objects are off the garbage collector's lists (PythonObjectHooks::park),
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

  // A call's borrows from this one on (by their position in the call) are
  // pooled by position: see take_at.
  static constexpr size_t kKeyedBorrows = 16;
  // An alias for the call's borrow at `position` (>= kKeyedBorrows) of `like`
  // (plain), with its `home`: the one the borrow at that position had last
  // (`shaped` set where its geometry matches), else undefined (make a new one).
  at::Tensor take_at(size_t position, const c10::TensorImpl& like, bool& shaped, size_t& home) {
    const size_t i = position - kKeyedBorrows;
    ++borrows_;
    if (C10_UNLIKELY(i >= positions_.size())) {
      return grow_positions(i, home);
    }
    home = kPositionHome + i;
    at::Tensor& a = positions_[i];
    if (C10_UNLIKELY(!a.defined())) {
      ++made_;
      return {};
    }
    shaped = same_plain_geometry(*a.unsafeGetTensorImpl(), like);
    reshaped_ += shaped ? 0 : 1;
    return std::move(a);
  }

  // Brings a borrowed alias home after the call (or keeps it spare).
  void give(at::Tensor&& alias, size_t home) {
    if (C10_LIKELY(home < kPositionHome)) {
      slots_[home].alias = std::move(alias);
      slots_[home].out = false;
      return;
    }
    give_elsewhere(std::move(alias), home);
  }

  // The alias borrowed from `home` does not come back (something else still
  // holds it, or the kernel raised): the slot is free for a new one.
  void vacate(size_t home) {
    if (home < kPositionHome) {
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
  C10_NOINLINE void give_elsewhere(at::Tensor&& alias, size_t home) {
    if (home != kNoHome) {
      positions_[home - kPositionHome] = std::move(alias);
    } else if (spare_.size() < kSpare) {
      spare_.push_back(std::move(alias));
    }
  }
  // A position past those pooled so far: pooled from now on, up to kPositions
  // (a longer call's last borrows get aliases of no home).
  C10_NOINLINE at::Tensor grow_positions(size_t i, size_t& home) {
    ++made_;
    if (i >= kPositions) {
      home = kNoHome;
      return {};
    }
    positions_.resize(i + 1);
    home = kPositionHome + i;
    return {};
  }

  // 256 slots: a layer of Qwen3-0.6B borrows ~45 distinct geometries; decode
  // adds a few per token as its cache grows, which then take the slots of
  // geometries no longer used.
  static constexpr size_t kSlotBits = 8;
  static constexpr size_t kSlots = size_t{1} << kSlotBits;
  static constexpr size_t kProbe = 4;  // slots per key: q, k and v of one shape in one call
  static constexpr size_t kSpare = 16;
  // Homes from kPositionHome on are positions_[home - kPositionHome].
  static constexpr size_t kPositionHome = kSlots + kProbe;
  // AdamW over 1,600 parameter tensors borrows 8,000 (Qwen3-0.6B: 311, 1,555).
  static constexpr size_t kPositions = 8192;
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
  c10::SmallVector<at::Tensor, kSpare> spare_;  // aliases without a home
  std::vector<at::Tensor> positions_;            // a long call's, by borrow position from kKeyedBorrows on
  int64_t made_ = 0;
  int64_t reshaped_ = 0;
  bool python_;
};

namespace detail {
// The calling thread's native-route pool, set on first use
// (tensor/alias_pool.cpp). A plain __thread pointer rather than thread_local:
// read from another unit, a thread_local would be reached through its wrapper
// function (it might have a dynamic initialiser), a __thread one is a TLS
// load. Hidden: it binds within the core, so the load takes the local-dynamic
// model, as it did when the per-call unit defined it.
extern __attribute__((visibility("hidden"))) __thread AliasPool* thread_alias_pool;
// Makes the calling thread's pool (out of line: once per thread).
AliasPool* new_thread_alias_pool();
}  // namespace detail

// The calling thread's pool for the native route (a thread-local lookup: once
// per routed call). Inline: route/'s unit reads it on every call without a
// call into tensor/'s (benchmarks/route_instructions.py counted the call).
inline AliasPool& alias_pool() {
  AliasPool* pool = detail::thread_alias_pool;
  return C10_LIKELY(pool != nullptr) ? *pool : *detail::new_thread_alias_pool();
}
// The calling thread's pool for Python kernels (with the GIL held); out of
// line, as the Python layer always called it.
AliasPool& python_alias_pool();
// The calling thread's pool's counts so far (`python`: the Python routes'
// pool): borrows, new aliases made, recycled ones reshaped. Tests and
// benchmarks/alias_pool.py.
std::tuple<int64_t, int64_t, int64_t> alias_pool_stats(bool python);

}  // namespace tensor
}  // namespace torch_fl
