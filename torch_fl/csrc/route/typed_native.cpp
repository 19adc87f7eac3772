// Typed native kernels for the operators models call most.
//
// The boxed route (route/native_route.cpp) serves every operator, but each call
// packs its arguments into IValues, unpacks them for the backing kernel, and
// packs and unpacks the results again; the packing copies the caller's
// tensors, which for a tensor only Python holds means two GIL hand-offs
// (RoutedArgs::arg). For the operators that make up almost every call of a
// transformer (route/typed_ops.h: mm, mul, add, cat, mean, copies, attention, the
// optimizer's _foreach ops) that is most of what flagos adds per call. Here
// each of them gets a kernel with its own C++ signature,
// generated from ATen's at::_ops::<op>::schema: arguments are swapped for
// borrowed aliases in place and the backing kernel is redispatched unboxed.
// Behaviour is the boxed route's (RoutedArgs does both): same aliases, same
// result wrapping, same out=/resize handling, same counts and dispatch log.
#include "route/typed_native.h"

#include "route/counters.h"
#include "route/native_route.h"
#include "route/profiling.h"
#include "route/routed_args.h"
#include "route/typed_call.h"
#include "route/typed_ops.h"
#include "runtime/device.h"

#include <ATen/Operators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/SmallVector.h>

#include <array>
#include <tuple>
#include <type_traits>
#include <utility>

namespace torch_fl {
namespace route {

namespace {

using runtime::g_backing;
using typed::tensors_in;
using typed::wrap;

// ------------------------------------------------------------ arguments
// How one parameter type is held during the call (Held) and handed to the
// backing kernel (pass). Everything not listed passes through untouched.
// map() is given the parameter's position in the schema (RoutedArgs::arg).
template <class T>
struct Param {
  using Held = T;
  static T map(RoutedArgs&, T v, size_t) {
    return v;
  }
  static T pass(T v) {
    return v;
  }
};

// Tensors are held as a borrowed alias (flagos) or the caller's own tensor,
// never as a copy of it (see RoutedArgs::arg).
// Their map() is always inlined into the kernel: the compiler otherwise kept
// it as a function of its own, a call per argument.
template <>
struct Param<const at::Tensor&> {
  using Held = c10::MaybeOwned<at::Tensor>;
  C10_ALWAYS_INLINE static Held map(RoutedArgs& a, const at::Tensor& t, size_t pos) {
    return a.arg(t, pos);
  }
  static const at::Tensor& pass(const Held& t) {
    return *t;
  }
};

template <>
struct Param<at::Tensor&> {
  using Held = c10::MaybeOwned<at::Tensor>;
  C10_ALWAYS_INLINE static Held map(RoutedArgs& a, const at::Tensor& t, size_t pos) {
    return a.arg(t, pos);
  }
  static at::Tensor& pass(const Held& t) {
    // Our own alias, or the caller's non-const tensor: writable either way.
    return const_cast<at::Tensor&>(*t);
  }
};

template <>
struct Param<const std::optional<at::Tensor>&> {
  using Held = std::optional<at::Tensor>;
  C10_ALWAYS_INLINE static std::optional<at::Tensor> map(RoutedArgs& a, const std::optional<at::Tensor>& t,
                                                         size_t pos) {
    if (t.has_value()) {
      return a.arg_value(*t, pos);
    }
    return t;
  }
  static const std::optional<at::Tensor>& pass(const std::optional<at::Tensor>& t) {
    return t;
  }
};

using HeldList = c10::SmallVector<at::Tensor, 8>;

template <class List>
HeldList map_list(RoutedArgs& a, const List& list, size_t pos) {
  HeldList out;
  out.reserve(list.size());
  for (const at::Tensor& t : list) {
    out.push_back(a.arg_value(t, pos));  // the list's own elements outlive the call
  }
  return out;
}

template <>
struct Param<at::TensorList> {
  using Held = HeldList;
  static HeldList map(RoutedArgs& a, at::TensorList list, size_t pos) {
    return map_list(a, list, pos);
  }
  static at::TensorList pass(const HeldList& held) {
    return held;
  }
};

template <>
struct Param<const at::ITensorListRef&> {
  using Held = HeldList;
  static HeldList map(RoutedArgs& a, const at::ITensorListRef& list, size_t pos) {
    return map_list(a, list, pos);
  }
  static at::ITensorListRef pass(const HeldList& held) {
    return at::ITensorListRef(at::TensorList(held));
  }
};

template <>
struct Param<const c10::List<std::optional<at::Tensor>>&> {
  using Held = c10::List<std::optional<at::Tensor>>;
  static Held map(RoutedArgs& a, const c10::List<std::optional<at::Tensor>>& list, size_t) {
    Held out;
    out.reserve(list.size());
    for (std::optional<at::Tensor> t : list) {  // a copy: the alias keeps what it borrows
      out.push_back(t.has_value() ? std::optional<at::Tensor>(a.index_value(*t, /*keep=*/true)) : std::move(t));
    }
    return out;
  }
  static const Held& pass(const Held& held) {
    return held;
  }
};

template <>
struct Param<std::optional<at::Device>> {
  using Held = std::optional<at::Device>;
  static Held map(RoutedArgs& a, std::optional<at::Device> d, size_t) {
    return a.device_arg(d);
  }
  static Held pass(Held d) {
    return d;
  }
};

// ---------------------------------------------------------------- kernel
template <class Op, class Schema = typename Op::schema>
struct Typed;

template <class Op, class Ret, class... Args>
struct Typed<Op, Ret(Args...)> {
  using Held = std::tuple<typename Param<Args>::Held...>;

  static inline std::optional<c10::TypedOperatorHandle<Ret(Args...)>> handle;
  static inline OpCounts* counts = nullptr;
  static inline bool mutates = false;
  // Arguments of an operator that writes them and returns nothing, whose
  // versions the route bumps (route/native_route.h, WrittenArguments).
  static inline std::array<bool, sizeof...(Args)> written{};
  static inline bool writes = false;

  static void bump(const at::Tensor& t) {
    if (t.defined() && t.device().type() == kFlagos) {
      t.unsafeGetTensorImpl()->bump_version();  // raises for an inference tensor outside inference_mode
    }
  }
  static void bump(at::TensorList list) {
    for (const at::Tensor& t : list) {
      bump(t);
    }
  }
  template <class T>
  static void bump(const T&) {}

  template <size_t... I>
  static void bump_written(std::index_sequence<I...>, const Args&... args) {
    (
        [&] {
          if (written[I]) {
            bump(args);
          }
        }(),
        ...);
  }

  template <size_t... I>
  static Ret redispatch(const RoutedArgs& a, Held& held, std::index_sequence<I...>) {
    try {
      return handle->redispatch(g_backing.keyset, Param<Args>::pass(std::get<I>(held))...);
    } catch (const c10::Error& e) {
      raise_if_host_oom(e, *handle, a);  // the host's CPU allocator refused: flagos's OOM
      throw;
    }
  }

  // An in-place or out= kernel returns one of its own arguments: hand back
  // the caller's tensor that stands where that alias was passed.
  template <size_t... I>
  static at::Tensor& caller_tensor(const at::Tensor& returned, Held& held, std::tuple<Args&&...> given,
                                   std::index_sequence<I...>) {
    at::Tensor* found = nullptr;
    (
        [&] {
          if constexpr (std::is_same_v<std::tuple_element_t<I, std::tuple<Args...>>, at::Tensor&>) {
            if (found == nullptr && &*std::get<I>(held) == &returned) {
              found = &std::get<I>(given);
            }
          }
        }(),
        ...);
    TORCH_INTERNAL_ASSERT(found != nullptr, "flagos: ", handle->schema().name(),
                          " returned a reference to none of its arguments");
    return *found;
  }

  static Ret call(Args... args) {
    record_native_call(*handle, counts);
    RouteScope scope(*handle);
    RoutedArgs a;
    if constexpr (std::is_void_v<Ret>) {
      run(a, args...);
      a.release();
      if (C10_UNLIKELY(writes)) {  // after the kernel, as CUDA's bump
        bump_written(std::index_sequence_for<Args...>{}, args...);
      }
    } else {
      Ret out = run(a, args...);
      a.release();  // after the held aliases are gone: only then are they recycled
      return out;
    }
  }

  // Braced initialisation maps the arguments left to right, as the boxed
  // route does (the first flagos argument names the result's device).
  template <size_t... I>
  C10_ALWAYS_INLINE static Held map_args(RoutedArgs& a, std::index_sequence<I...>, const Args&... args) {
    return Held{Param<Args>::map(a, args, I)...};
  }

  static Ret run(RoutedArgs& a, Args... args) {
    constexpr auto indices = std::index_sequence_for<Args...>{};
    a.reserve((tensors_in(args) + ... + size_t{0}));
    Held held = map_args(a, indices, args...);
    if (C10_UNLIKELY(a.check_devices(*handle))) {
      return run_foreach_per_element(*handle, std::forward<Args>(args)...);
    }
    if constexpr (std::is_void_v<Ret>) {
      redispatch(a, held, indices);
      if (mutates) {
        a.sync_mutated();
      }
    } else if constexpr (std::is_same_v<Ret, at::Tensor&>) {
      at::Tensor& r = redispatch(a, held, indices);
      if (mutates) {
        a.sync_mutated();
      }
      return caller_tensor(r, held, std::forward_as_tuple(std::forward<Args>(args)...), indices);
    } else {
      Ret r = redispatch(a, held, indices);
      if (mutates) {
        a.sync_mutated();
      }
      return wrap(a, std::move(r));
    }
  }

  static void add_to(KernelList* out) {
    auto op = c10::Dispatcher::singleton().findSchema({Op::name, Op::overload_name});
    if (!op || !native_route_may_own(*op)) {
      return;  // the boxed route decides, e.g. a CPU fallback
    }
    handle = op->template typed<Ret(Args...)>();
    counts = op_counts(*op);
    mutates = op->schema().is_mutable();
    writes = writes_without_returning(op->schema());
    for (size_t i = 0; i < sizeof...(Args); ++i) {
      const auto* alias = op->schema().arguments()[i].alias_info();
      written[i] = writes && alias != nullptr && alias->isWrite();
    }
    out->push_back({typed::overload_of<Op>(), torch::CppFunction(TORCH_FN(call))});
  }
};

}  // namespace

KernelList typed_native_kernels() {
  KernelList out;
#define FLAGOS_ADD_TYPED(op) Typed<at::_ops::op>::add_to(&out);
  FLAGOS_TYPED_OPS(FLAGOS_ADD_TYPED)
#undef FLAGOS_ADD_TYPED
  return out;
}

}  // namespace route
}  // namespace torch_fl
