// flagos's autograd kernels for the typed operators (route/typed_ops.h): a call
// that autograd has nothing to record for goes straight to the routed kernel.
//
// PyTorch's autograd kernel of an operator (VariableType) runs on every call
// of a tensor with autograd keys, under no_grad too. When no input requires a
// gradient (or grad mode is off) and none carries a forward-mode tangent, it
// records nothing and only redispatches below autograd; but its check for
// tangents copies each tensor argument into a std::optional, and a tensor
// that only Python holds goes from one C++ reference to two and back, each
// step taking the GIL (torch's PyObject preservation; the binding released
// the GIL, so each is a real acquire): a good part of a small CPU `a + b`
// (benchmarks/route_instructions.py counts it). A greedy decode is such calls
// only, one after the other.
//
// Here the same decision is made without the copies: a call whose tensors
// have no autograd metadata at all (activations made under no_grad), or whose
// metadata says no gradient and no tangent, runs below autograd exactly as
// VariableType would run it (the same exclusion guard, the same keys for the
// redispatch). Every other call (one that records, a tangent, an undefined
// tensor, a Python mode or another layer below autograd) goes to VariableType
// itself, reached through the AutogradOther slot, where PyTorch computes the
// same kernel for these operators (checked at registration).
// Only functional operators get one: in-place and out= forms need
// ADInplaceOrView's version bump, which VariableType's path keeps.
#include "autograd/autograd_shortcut.h"

#include "route/typed_call.h"
#include "route/typed_ops.h"
#include "runtime/library.h"

#include <ATen/Operators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <optional>
#include <utility>

namespace torch_fl {
namespace autograd {

namespace {

// True when autograd records nothing for `t`: no metadata (the common case,
// one load), or metadata with neither a gradient to record nor a tangent.
C10_ALWAYS_INLINE bool records_nothing(const at::Tensor& t) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (C10_LIKELY(impl->autograd_meta() == nullptr)) {
    return t.defined();  // an undefined tensor: VariableType's error
  }
  return !(t.requires_grad() && at::GradMode::is_enabled()) && !t._fw_grad(/*level=*/0).defined();
}

template <class T>
C10_ALWAYS_INLINE bool records_nothing(const T&) {
  return true;  // not a tensor
}

C10_ALWAYS_INLINE bool records_nothing(const std::optional<at::Tensor>& t) {
  return !t.has_value() || !t->defined() || records_nothing(*t);
}

template <class List>
bool list_records_nothing(const List& list) {
  for (const at::Tensor& t : list) {
    if (!records_nothing(t)) {
      return false;
    }
  }
  return true;
}

inline bool records_nothing(at::TensorList list) {
  return list_records_nothing(list);
}

inline bool records_nothing(const at::ITensorListRef& list) {
  return list_records_nothing(list);
}

inline bool records_nothing(const c10::List<std::optional<at::Tensor>>& list) {
  for (const std::optional<at::Tensor> t : list) {
    if (!records_nothing(t)) {
      return false;
    }
  }
  return true;
}

// Whether the kernel below autograd is flagos's own. BackendSelect may come
// first: operators with tensor options (_to_copy, the *_like factories) have
// a kernel there that picks the backend from the options and the tensors, as
// it does when VariableType redispatches to it.
// The test is highestPriorityTypeId() == PrivateUse1 (after BackendSelect) in
// a few bit operations: that function is a call of its own, per routed call.
// Dense is the lowest functionality, so it is the highest only when it is the
// only one; its backend is then the highest backend bit.
constexpr c10::DispatchKeySet kDense(c10::DispatchKey::Dense);  // the functionality bit alone
constexpr c10::DispatchKeySet kFlagosBackend(c10::BackendComponent::PrivateUse1Bit);
constexpr uint64_t kBackendBits = c10::full_backend_mask;
C10_ALWAYS_INLINE bool next_is_flagos(c10::DispatchKeySet below) {
  const uint64_t raw = below.remove(c10::DispatchKey::BackendSelect).raw_repr();
  const uint64_t flagos = kFlagosBackend.raw_repr();
  const uint64_t above_flagos = kBackendBits & ~((flagos << 1) - 1);  // PrivateUse2, PrivateUse3, Meta
  return (raw & ~kBackendBits) == kDense.raw_repr() && (raw & flagos) != 0 && (raw & above_flagos) == 0;
}

// next_is_flagos() against the dispatcher's own answer, once at registration,
// on keysets a call below autograd can bring.
void check_next_is_flagos() {
  using K = c10::DispatchKey;
  const c10::DispatchKeySet flagos(K::PrivateUse1);
  const c10::DispatchKeySet cases[] = {
      flagos,
      flagos | c10::DispatchKeySet(K::CPU),
      flagos | c10::DispatchKeySet(K::BackendSelect),
      flagos | c10::DispatchKeySet(K::BackendSelect) | c10::DispatchKeySet(K::CPU),
      flagos | c10::DispatchKeySet(K::Meta),
      flagos | c10::DispatchKeySet(K::Python),
      flagos | c10::DispatchKeySet(K::Python) | c10::DispatchKeySet(K::BackendSelect),
      flagos | c10::DispatchKeySet(K::Functionalize),
      flagos | c10::DispatchKeySet(K::Conjugate),
      flagos | c10::DispatchKeySet(K::SparsePrivateUse1),
      flagos | c10::DispatchKeySet(K::PrivateUse2),
      c10::DispatchKeySet(K::CPU),
      c10::DispatchKeySet(K::CUDA) | c10::DispatchKeySet(K::BackendSelect),
      c10::DispatchKeySet(K::BackendSelect),
      c10::DispatchKeySet(),
  };
  for (const auto& ks : cases) {
    K next = ks.highestPriorityTypeId();
    if (next == K::BackendSelect) {
      next = ks.remove(K::BackendSelect).highestPriorityTypeId();
    }
    TORCH_INTERNAL_ASSERT(next_is_flagos(ks) == (next == K::PrivateUse1), "flagos: next_is_flagos() disagrees with ",
                          "the dispatcher on ", ks);
  }
}

template <class Op, class Schema = typename Op::schema>
struct Shortcut;

template <class Op, class Ret, class... Args>
struct Shortcut<Op, Ret(Args...)> {
  static inline std::optional<c10::TypedOperatorHandle<Ret(Args...)>> handle;

  static Ret call(c10::DispatchKeySet ks, Args... args) {
    // What VariableType redispatches with: the keys below autograd. The
    // shortcut only where the next of them is flagos's own kernel (no Python
    // mode, functionalization or conjugate view in between).
    const c10::DispatchKeySet below = ks & c10::after_autograd_keyset;
    if (C10_LIKELY(next_is_flagos(below) && (records_nothing(args) && ...))) {
      at::AutoDispatchBelowADInplaceOrView guard;
      return handle->redispatch(below, std::forward<Args>(args)...);
    }
    return handle->redispatch(below | c10::DispatchKeySet(c10::DispatchKey::AutogradOther),
                              std::forward<Args>(args)...);
  }

  static void add_to(torch::Library& lib) {
    auto op = c10::Dispatcher::singleton().findSchema({Op::name, Op::overload_name});
    if (!op || op->schema().is_mutable() || !op->hasKernelForDispatchKey(c10::DispatchKey::Autograd) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::AutogradOther) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::AutogradPrivateUse1) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) {
      return;  // VariableType's path as is (see the top of this file)
    }
    for (const auto& ret : op->schema().returns()) {
      if (ret.alias_info() != nullptr) {
        return;  // a view of an input: ADInplaceOrView records it
      }
    }
    handle = op->template typed<Ret(Args...)>();
    lib.impl(route::typed::overload_of<Op>().c_str(), TORCH_FN(call));
  }
};

}  // namespace

void register_autograd_shortcut() {
  check_next_is_flagos();
  auto& lib = runtime::new_library("aten", c10::DispatchKey::AutogradPrivateUse1, __FILE__, __LINE__);
#define FLAGOS_ADD_SHORTCUT(op) Shortcut<at::_ops::op>::add_to(lib);
  FLAGOS_TYPED_OPS(FLAGOS_ADD_SHORTCUT)
#undef FLAGOS_ADD_SHORTCUT
}

}  // namespace autograd
}  // namespace torch_fl
