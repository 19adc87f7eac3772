// Typed fronts of Python routes (python/typed_fronts.h).
#include "python/typed_fronts.h"

#include "route/overlap_check.h"
#include "route/typed_call.h"
#include "route/typed_ops.h"

#include <ATen/Operators.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <type_traits>
#include <unordered_map>
#include <utility>

namespace torch_fl {
namespace python {

namespace {

// A Python argument of a typed call: flagos tensors as their borrowed
// aliases (from the Python pool), the rest as the boxed route converts them.
// `pos`: the argument's position in the schema (route::RoutedArgs::arg).
template <class T>
py::object py_arg(route::RoutedArgs&, const T& v, size_t) {
  return torch::jit::toPyObject(c10::IValue(v));
}
// A scalar argument (add's alpha) as the Python number the boxed route makes
// of it, without the IValue round trip for the common kinds.
py::object py_arg(route::RoutedArgs&, const c10::Scalar& v, size_t) {
  if (v.isSymbolic()) {
    return torch::jit::toPyObject(c10::IValue(v));
  }
  if (v.type() == c10::ScalarType::Long) {
    return py::reinterpret_steal<py::object>(PyLong_FromLongLong(v.toLong()));
  }
  if (v.type() == c10::ScalarType::Double) {
    return py::reinterpret_steal<py::object>(PyFloat_FromDouble(v.toDouble()));
  }
  return torch::jit::toPyObject(c10::IValue(v));
}
py::object py_tensor(const at::Tensor& t) {
  return py::reinterpret_steal<py::object>(THPVariable_Wrap(t));
}
py::object py_arg(route::RoutedArgs& a, const at::Tensor& t, size_t pos) {
  const c10::MaybeOwned<at::Tensor> given = a.arg(t, pos);  // a flagos tensor's alias; another itself, noted as foreign
  if (given->unsafeGetTensorImpl() != t.unsafeGetTensorImpl()) {
    return py_tensor(*given);
  }
  // As the boxed route hands them over: a scalar operand (x - 1 passes a
  // wrapped-number tensor) as the Python number it was.
  return torch::jit::toPyObject(c10::IValue(t));
}
py::object py_arg(route::RoutedArgs& a, const std::optional<at::Tensor>& t, size_t pos) {
  return t.has_value() ? py_tensor(a.arg_value(*t, pos)) : py::none();
}
template <class List>
py::object py_list(route::RoutedArgs& a, const List& list, size_t pos) {
  py::list out(list.size());
  size_t i = 0;
  for (const at::Tensor& t : list) {
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i++), py_tensor(a.arg_value(t, pos)).release().ptr());
  }
  return out;
}
py::object py_arg(route::RoutedArgs& a, at::TensorList list, size_t pos) {
  return py_list(a, list, pos);
}
py::object py_arg(route::RoutedArgs& a, const at::ITensorListRef& list, size_t pos) {
  return py_list(a, list, pos);
}
py::object py_arg(route::RoutedArgs& a, const c10::List<std::optional<at::Tensor>>& list, size_t) {
  py::list out(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::optional<at::Tensor> t = list.get(i);
    // An indexing operator's indices: a CPU one is checked as an index (RoutedArgs::index_value). `t` is a
    // copy that ends with this iteration: the borrow keeps its own reference.
    py::object item = t.has_value() ? py_tensor(a.index_value(*t, /*keep=*/true)) : py::none();
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), item.release().ptr());
  }
  return out;
}
py::object py_arg(route::RoutedArgs& a, std::optional<at::Device> d, size_t) {
  return torch::jit::toPyObject(c10::IValue(a.device_arg(d)));
}

// What the boxed route looks at before calling fn: the first tensor's dtype
// (routed elsewhere for some dtypes) and whether an input is empty.
template <class T>
const at::Tensor* first_tensor(const T&) {
  return nullptr;
}
const at::Tensor* first_tensor(const at::Tensor& t) {
  return t.defined() ? &t : nullptr;
}
const at::Tensor* first_tensor(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? &*t : nullptr;
}
const at::Tensor* first_tensor(at::TensorList list) {
  return list.empty() ? nullptr : &list[0];
}
const at::Tensor* first_tensor(const at::ITensorListRef& list) {
  return list.size() == 0 ? nullptr : &list.front();
}
template <class T>
bool is_empty_input(const T&) {
  return false;
}
bool is_empty_input(const at::Tensor& t) {
  return t.defined() && t.numel() == 0;
}
bool is_empty_input(const std::optional<at::Tensor>& t) {
  return t.has_value() && is_empty_input(*t);
}
template <class List>
bool has_empty_element(const List& list) {
  for (const at::Tensor& t : list) {
    if (is_empty_input(t)) {
      return true;
    }
  }
  return false;
}
bool is_empty_input(at::TensorList list) {
  return has_empty_element(list);
}
bool is_empty_input(const at::ITensorListRef& list) {
  return has_empty_element(list);
}

// A typed front on PyRoute, for the operators of route/typed_ops.h. Called through
// the dispatcher's boxing, a boxed kernel's arguments are copied into IValues,
// and the first C++ copy of a tensor only Python holds increfs its PyObject
// (PyTorch takes the GIL for it), dropping the copy decrefs it: two GIL
// hand-offs per flagos argument, and the aliases go through IValues once
// more. The front takes the GIL once, hands fn Python objects of borrowed
// aliases made straight from the typed arguments (no copy of the caller's
// tensors), and calls it with a vectorcall. The policies that call something
// other than fn (a dtype routed elsewhere, an empty input) go through the
// boxed kernel, as every operator without a front does.
template <class Op, class Schema = typename Op::schema>
struct PyFront;

template <class Op, class Ret, class... Args>
struct PyFront<Op, Ret(Args...)> {
  // Set when the front is registered (with the GIL); a later registration replaces them.
  static inline std::optional<c10::BoxedKernel> kernel;
  static inline std::optional<c10::OperatorHandle> handle;
  static inline PyRouteKernel* route = nullptr;  // owned by `kernel`
  static inline size_t npos = 0;                 // positional arguments; the rest are keyword-only
  static inline PyObject* kwnames = nullptr;
  static inline bool mutates = false;            // the schema writes an argument (in-place, out=)

  static Ret call(Args... args) {
    // Replay (a FlagGems signature recorded before) runs in the boxed
    // kernel, without the GIL: only a route without it calls Python from here.
    if (!route->slot()->native.load(std::memory_order_relaxed) &&
        !route->slot()->replay.any.load(std::memory_order_relaxed)) {
      GilHeld gil;
      // A route change may swap the state during this call: the call keeps the state it started with.
      std::shared_ptr<PyRouteState> st = route->slot()->state;
      // A plan with argument rules reads the argument from the boxed call's stack.
      const Target* t = st == nullptr || st->any_value
                            ? nullptr
                            : &st->target(first_dtype(args...), [&] { return first_numel(args...); });
      // Only a backend kernel on a call without an empty input runs here; the
      // boxed kernel classifies and runs every other call (native ones
      // without the GIL).
      if (t != nullptr && t->kind == TargetKind::kKernel && !(t->notice && C10_UNLIKELY(has_empty(args...)))) {
        return run_kernel(*t, args...);
      }
    }
    return c10::impl::BoxedKernelWrapper<Ret(Args...)>::call(
        *kernel, *handle, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), std::forward<Args>(args)...);
  }

 private:
  static Ret run_kernel(const Target& t, Args&... args) {
    if (C10_UNLIKELY(route::g_route_flags.log_dispatch)) {
      std::cerr << t.line << std::flush;
    }
    ++*t.calls;
    route::RoutedArgs routed(tensor::python_alias_pool());
    routed.reserve((route::typed::tensors_in(args) + ... + size_t{0}));
    c10::SmallVector<py::object, 8> objects;
    push_args(routed, objects, std::index_sequence_for<Args...>{}, args...);
    if (C10_UNLIKELY(routed.check_devices(*handle))) {
      objects.clear();
      return route::run_foreach_per_element(handle->template typed<Ret(Args...)>(), args...);
    }
    if (C10_UNLIKELY(mutates && routed.shares_storage())) {
      route::check_written_overlaps(*handle, c10::impl::boxArgs<Args...>(args...));
    }
    py::object result = call_fn(t, objects, routed.index());
    if (C10_UNLIKELY(!result)) {
      py::error_already_set error;
      objects.clear();
      return on_error(t, error, args...);
    }
    // The Python objects go first: then an alias whose object nothing else
    // holds is recycled, and a result's object is handed back to the caller.
    auto drop_python = [&] {
      result = py::object();
      objects.clear();
      if (mutates) {
        routed.sync_mutated();
      }
    };
    if constexpr (std::is_same_v<Ret, at::Tensor>) {
      // One plain tensor, the common result: taken from its Python object
      // directly (no boxed stack, no conversion by the schema's type).
      if (C10_LIKELY(THPVariable_CheckExact(result.ptr()))) {
        at::Tensor out = THPVariable_Unpack(result.ptr());
        drop_python();
        out = routed.result(std::move(out));
        routed.release();
        return out;
      }
    }
    torch::jit::Stack stack;
    push_python_result(handle->schema(), result, &stack);
    drop_python();
    if constexpr (std::is_void_v<Ret>) {
      routed.release();
    } else if constexpr (std::is_same_v<Ret, at::Tensor&>) {
      routed.release();
      return self(args...);
    } else {
      Ret out = route::typed::wrap(routed, c10::impl::PopResult<Ret>::call(stack));
      routed.release();
      return out;
    }
  }

 public:
  static void install(torch::Library& lib, const char* op, Slot slot) {
    handle = c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
    auto boxed = std::make_unique<PyRouteKernel>(std::move(slot));
    route = boxed.get();
    kernel = c10::BoxedKernel::makeFromFunctor(std::move(boxed));
    const auto& params = handle->schema().arguments();
    npos = 0;
    while (npos < params.size() && !params[npos].kwarg_only()) {
      ++npos;
    }
    kwnames = route->kwnames(handle->schema());
    mutates = handle->schema().is_mutable();
    lib.impl(op, TORCH_FN(call));
  }

 private:

  // Left to right: the first flagos tensor names the device.
  template <size_t... I>
  static void push_args(route::RoutedArgs& routed, c10::SmallVector<py::object, 8>& objects, std::index_sequence<I...>,
                        const Args&... args) {
    (objects.push_back(py_arg(routed, args, I)), ...);
  }

  static py::object call_fn(const Target& t, const c10::SmallVector<py::object, 8>& objects,
                            c10::DeviceIndex index) {
    // Launch on the arguments' device (a flagos stream is a CUDA stream).
    c10::OptionalDeviceGuard guard;
    if (index >= 0 && index != runtime::current_device()) {
      guard.reset_device(c10::Device(kFlagos, index));
    }
    route::RouteScope scope(*handle, t.label.c_str());
    return vectorcall(t.fn, objects, npos, kwnames);
  }

  static c10::ScalarType first_dtype(const Args&... args) {
    const at::Tensor* first = nullptr;
    ((first = first == nullptr ? first_tensor(args) : first), ...);
    return first == nullptr ? c10::ScalarType::Undefined : first->scalar_type();
  }

  static int64_t first_numel(const Args&... args) {
    const at::Tensor* first = nullptr;
    ((first = first == nullptr ? first_tensor(args) : first), ...);
    return first == nullptr ? 0 : first->numel();
  }

  static bool has_empty(const Args&... args) {
    // Not an argument the operator writes (an out= tensor it will resize).
    const auto& params = handle->schema().arguments();
    size_t i = 0;
    bool empty = false;
    (
        [&] {
          const auto* alias = params[i++].alias_info();
          empty = empty || ((alias == nullptr || !alias->isWrite()) && is_empty_input(args));
        }(),
        ...);
    return empty;
  }

  // In-place operators return their first argument, the caller's own tensor.
  // What an in-place or out= operator returns: its first non-const tensor
  // reference (self for add_, out for mm.out).
  static at::Tensor& self(Args&... args) {
    at::Tensor* found = nullptr;
    (
        [&] {
          if constexpr (std::is_same_v<Args, at::Tensor&>) {
            if (found == nullptr) {
              found = &args;
            }
          }
        }(),
        ...);
    TORCH_INTERNAL_ASSERT(found != nullptr, "flagos: ", handle->schema().name(), " returns no tensor it writes");
    return *found;
  }

  // fn raised: the routing layer's policy decides (a fallback, once logged,
  // or the error), given the caller's own arguments.
  static Ret on_error(const Target& t, py::error_already_set& error, Args&... args) {
    py::tuple positional(npos);
    py::dict keywords;
    size_t i = 0;
    (
        [&] {
          py::object o = torch::jit::toPyObject(c10::IValue(args));  // as the boxed route's error path
          if (i < npos) {
            PyTuple_SET_ITEM(positional.ptr(), static_cast<Py_ssize_t>(i), o.release().ptr());
          } else {
            PyDict_SetItem(keywords.ptr(), PyTuple_GET_ITEM(kwnames, static_cast<Py_ssize_t>(i - npos)), o.ptr());
          }
          ++i;
        }(),
        ...);
    py::object result = PyRouteKernel::call_on_error(t, error, first_dtype(args...), positional, keywords);
    torch::jit::Stack stack;
    push_python_result(handle->schema(), result, &stack);
    if constexpr (std::is_same_v<Ret, at::Tensor&>) {
      return self(args...);
    } else if constexpr (!std::is_void_v<Ret>) {
      return c10::impl::PopResult<Ret>::call(stack);  // flagos results already
    }
  }
};

}  // namespace

// The typed front of an operator, or nullptr where it has none.
FrontInstaller py_front(const std::string& op) {
  static const auto* fronts = [] {
    auto* m = new std::unordered_map<std::string, FrontInstaller>;  // leaked: used until exit
#define FLAGOS_PY_FRONT(op) (*m)[route::typed::overload_of<at::_ops::op>()] = &PyFront<at::_ops::op>::install;
    FLAGOS_TYPED_OPS(FLAGOS_PY_FRONT)
#undef FLAGOS_PY_FRONT
    return m;
  }();
  auto it = fronts->find(op);
  return it == fronts->end() ? nullptr : it->second;
}

}  // namespace python
}  // namespace torch_fl
