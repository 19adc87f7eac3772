// OnNative: calls a Python function (a FlagGems kernel) on native aliases of
// its flagos arguments and returns flagos results, in C++.
//
// The Python version of this wrapper cost several microseconds per call,
// mostly interpreter work; this one walks the arguments once in C++.
#include "flagos.h"
#include "typed_call.h"
#include "typed_ops.h"

#include <ATen/core/boxing/impl/boxing.h>

#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/library.h>

#include <array>
#include <unordered_map>
#include <iostream>
#include <torch/extension.h>

namespace torch_fl {
namespace {

struct Swap {
  at::Tensor flagos;
  at::Tensor alias;
  c10::StorageImpl* alias_storage;
};
using SwapList = c10::SmallVector<Swap, 6>;

struct Walk {
  SwapList swaps;
  c10::DeviceIndex index = -1;
};

// Returns a new reference: the argument with flagos tensors swapped for native aliases.
py::object to_native(const py::handle& obj, Walk& walk) {
  PyObject* o = obj.ptr();
  if (THPVariable_Check(o)) {
    const at::Tensor& t = THPVariable_Unpack(o);
    if (t.defined() && t.device().type() == kFlagos) {
      at::Tensor alias = native_alias(t, /*owning=*/true);
      if (walk.index < 0) {
        walk.index = t.device().index();
      }
      walk.swaps.push_back({t, alias, alias.storage().unsafeGetStorageImpl()});
      return py::reinterpret_steal<py::object>(THPVariable_Wrap(alias));
    }
    return py::reinterpret_borrow<py::object>(obj);
  }
  if (PyList_Check(o) || PyTuple_Check(o)) {
    const bool is_list = PyList_Check(o);
    const Py_ssize_t n = is_list ? PyList_GET_SIZE(o) : PyTuple_GET_SIZE(o);
    py::object out = is_list ? py::object(py::list(n)) : py::object(py::tuple(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* item = is_list ? PyList_GET_ITEM(o, i) : PyTuple_GET_ITEM(o, i);
      py::object conv = to_native(item, walk);
      if (is_list) {
        PyList_SET_ITEM(out.ptr(), i, conv.release().ptr());
      } else {
        PyTuple_SET_ITEM(out.ptr(), i, conv.release().ptr());
      }
    }
    return out;
  }
  return py::reinterpret_borrow<py::object>(obj);
}

py::object to_flagos(const py::handle& obj, const Walk& walk) {
  PyObject* o = obj.ptr();
  if (THPVariable_Check(o)) {
    const at::Tensor& r = THPVariable_Unpack(o);
    if (!r.defined() || r.device().type() != g_backing.type) {
      return py::reinterpret_borrow<py::object>(obj);
    }
    for (const auto& s : walk.swaps) {
      if (r.unsafeGetTensorImpl() == s.alias.unsafeGetTensorImpl()) {
        return py::reinterpret_steal<py::object>(THPVariable_Wrap(s.flagos));
      }
    }
    return py::reinterpret_steal<py::object>(
        THPVariable_Wrap(flagos_alias(r, walk.index < 0 ? current_device() : walk.index)));
  }
  if (PyTuple_Check(o)) {
    const Py_ssize_t n = PyTuple_GET_SIZE(o);
    py::tuple out(n);
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyTuple_SET_ITEM(out.ptr(), i, to_flagos(PyTuple_GET_ITEM(o, i), walk).release().ptr());
    }
    return out;
  }
  if (PyList_Check(o)) {
    const Py_ssize_t n = PyList_GET_SIZE(o);
    py::list out(n);
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyList_SET_ITEM(out.ptr(), i, to_flagos(PyList_GET_ITEM(o, i), walk).release().ptr());
    }
    return out;
  }
  return py::reinterpret_borrow<py::object>(obj);
}

}  // namespace

void bind_on_native(py::module& m) {
  struct OnNative {
    py::object fn;
  };
  py::class_<OnNative>(m, "OnNative",
                       "OnNative(fn)(*args, **kwargs): fn on native aliases of the flagos arguments, "
                       "results returned as flagos tensors (zero copy).")
      .def(py::init([](py::object fn) { return OnNative{std::move(fn)}; }), py::arg("fn"))
      .def_property_readonly("fn", [](const OnNative& self) { return self.fn; })
      .def("__call__", [](const OnNative& self, py::args args, py::kwargs kwargs) {
        Walk walk;
        py::object nargs = to_native(args, walk);
        py::dict nkwargs;
        for (auto item : kwargs) {
          nkwargs[item.first] = to_native(item.second, walk);
        }
        py::object result;
        {
          // Launch on the arguments' device (a flagos stream is a CUDA stream).
          c10::OptionalDeviceGuard guard;
          if (walk.index >= 0 && walk.index != current_device()) {
            guard.reset_device(c10::Device(kFlagos, walk.index));
          }
          result = self.fn(*nargs, **nkwargs);
        }
        // out= arguments the kernel resized or re-pointed.
        for (const auto& s : walk.swaps) {
          sync_back_if_changed(s.flagos, s.alias, s.alias_storage);
        }
        return to_flagos(result, walk);
      });
}

}  // namespace torch_fl

// ---------------------------------------------------------------------------
// PyRoute: the PrivateUse1 kernel of an operator routed to a Python backend
// (FlagGems). It calls the backend's function on native aliases with the
// boxed call handled in C++: no torch.library Python kernel, no wrapper
// frames, no alias objects per call. The routing layer keeps the policy in
// Python: `on_error(exc, args, kwargs)`, `other_dtype(*args, **kwargs)` and
// `on_empty(*args, **kwargs)` receive the caller's flagos arguments.
namespace torch_fl {
namespace {

struct PyRouteState {
  py::object fn;           // called with native arguments, as the aten operator
  py::object on_error;     // (exception, args, kwargs) -> result
  py::object other_dtype;  // called like the operator for the dtypes in `other`
  py::object on_empty;     // called like the operator when an input tensor is empty; null: no such check
  py::object cell;         // the routing layer's array('q', [calls, fallbacks, failures])
  // cell[0], counted here with the GIL held: through the array's buffer, held
  // while the state lives (which also keeps the array from being resized).
  int64_t* calls = nullptr;
  Py_buffer cell_view{};
  std::array<bool, static_cast<size_t>(c10::ScalarType::NumOptions)> other{};
  bool any_other = false;  // some dtype is in `other`
  std::string line;  // the dispatch-log line, printed while g_route_flags.log_dispatch is on

  // The last reference may be dropped by a kernel call without the GIL, or
  // by the dispatcher's own destruction after Python has shut down (the
  // registration is never deleted at exit): then the objects are gone with
  // the interpreter and taking the GIL would abort the process.
  ~PyRouteState() {
    if (!python_alive()) {
      for (py::object* o : {&fn, &on_error, &other_dtype, &on_empty, &cell}) {
        o->release();
      }
      return;
    }
    py::gil_scoped_acquire gil;
    if (calls != nullptr) {
      PyBuffer_Release(&cell_view);
    }
    fn = on_error = other_dtype = on_empty = cell = py::object();
  }

  static bool python_alive() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsInitialized() && !Py_IsFinalizing();
#else
    return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
  }
};

// A pooled alias's Python object, if it has one.
PyObject* python_object_of(c10::TensorImpl* alias) {
  return alias->pyobj_slot()->load_pyobj();
}

}  // namespace

bool park_python_alias(c10::TensorImpl* alias) {
  PyObject* obj = python_object_of(alias);
  if (obj == nullptr) {
    return true;  // only the pool holds it
  }
  // A weak reference could hand it to Python while it waits. (The offset is
  // negative for objects whose weak references CPython keeps before the
  // object, 3.12+; zero for types without weak references.)
  const Py_ssize_t offset = Py_TYPE(obj)->tp_weaklistoffset;
  if (offset != 0 && *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + offset) != nullptr) {
    return false;
  }
  if (PyObject_GC_IsTracked(obj)) {
    PyObject_GC_UnTrack(obj);
  }
  return true;
}

void unpark_python_alias(c10::TensorImpl* alias) {
  PyObject* obj = python_object_of(alias);
  if (obj != nullptr && !PyObject_GC_IsTracked(obj)) {
    PyObject_GC_Track(obj);
  }
}

namespace {

// Holds the GIL for a scope (re-entrant). On a routed call's path this is a
// fraction of pybind11's gil_scoped_acquire, whose lookups of its internals
// and thread state cost ~850 instructions per acquire (callgrind, host,
// 2026-11-30), twice per call through a typed front.
class GilHeld {
 public:
  GilHeld() : state_(PyGILState_Ensure()) {}
  ~GilHeld() {
    PyGILState_Release(state_);
  }
  GilHeld(const GilHeld&) = delete;
  GilHeld& operator=(const GilHeld&) = delete;

 private:
  PyGILState_STATE state_;
};

c10::ScalarType first_dtype(const torch::jit::Stack& stack, size_t first) {
  for (size_t i = first; i < stack.size(); ++i) {
    if (stack[i].isTensor()) {
      return stack[i].toTensor().scalar_type();
    }
    if (stack[i].isTensorList()) {
      auto list = stack[i].toTensorList();
      if (list.size() > 0) {
        return list.get(0).scalar_type();
      }
    }
  }
  return c10::ScalarType::Undefined;
}

// Whether an input of the call (a tensor, or a tensor of a list; not an
// argument the operator writes, such as an out= tensor it will resize) is empty.
bool has_empty_input(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t first) {
  const auto& params = schema.arguments();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto* alias = params[i].alias_info();
    if (alias != nullptr && alias->isWrite()) {
      continue;
    }
    const c10::IValue& v = stack[first + i];
    if (v.isTensor()) {
      if (v.toTensor().defined() && v.toTensor().numel() == 0) {
        return true;
      }
    } else if (v.isTensorList()) {
      const auto list = v.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        const at::Tensor t = list.get(j);
        if (t.defined() && t.numel() == 0) {
          return true;
        }
      }
    }
  }
  return false;
}

// An operator's keyword-only argument names as a tuple of interned Python
// strings, the `kwnames` of a vectorcall; made once per kernel and kept for
// the process's life (dropping it would need the GIL at exit). Null when the
// operator has no keyword-only arguments.
PyObject* kwarg_names(const c10::FunctionSchema& schema, std::optional<PyObject*>& cache) {
  if (C10_UNLIKELY(!cache.has_value())) {
    c10::SmallVector<PyObject*, 4> names;
    for (const auto& p : schema.arguments()) {
      if (p.kwarg_only()) {
        names.push_back(PyUnicode_InternFromString(p.name().c_str()));
      }
    }
    PyObject* tuple = nullptr;
    if (!names.empty()) {
      tuple = PyTuple_New(static_cast<Py_ssize_t>(names.size()));
      for (size_t i = 0; i < names.size(); ++i) {
        PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), names[i]);  // steals the reference
      }
    }
    cache = tuple;
  }
  return *cache;
}

// fn(*objects[:npos], **dict(zip(kwnames, objects[npos:]))) by vectorcall;
// null with the Python error set when fn raised.
py::object vectorcall(const py::object& fn, const c10::SmallVector<py::object, 8>& objects, size_t npos,
                      PyObject* kwnames) {
  c10::SmallVector<PyObject*, 8> ptrs;
  for (const auto& o : objects) {
    ptrs.push_back(o.ptr());
  }
  return py::reinterpret_steal<py::object>(PyObject_Vectorcall(fn.ptr(), ptrs.data(), npos, kwnames));
}

// An operator's arguments as Python objects: the positional ones, then the
// keyword-only ones named by `kwnames`, laid out for a vectorcall (no
// argument tuple or keyword dict is built per call).
struct PyArgs {
  c10::SmallVector<py::object, 8> objects;
  size_t npos = 0;
  PyObject* kwnames = nullptr;  // borrowed from the kernel's cache

  py::object call(const py::object& fn) const {
    py::object r = vectorcall(fn, objects, npos, kwnames);
    if (!r) {
      throw py::error_already_set();
    }
    return r;
  }
  // As (args, kwargs), for the error policy.
  py::tuple args_tuple() const {
    py::tuple t(npos);
    for (size_t i = 0; i < npos; ++i) {
      PyTuple_SET_ITEM(t.ptr(), static_cast<Py_ssize_t>(i), py::object(objects[i]).release().ptr());
    }
    return t;
  }
  py::dict kwargs_dict() const {
    py::dict d;
    for (size_t i = npos; i < objects.size(); ++i) {
      PyDict_SetItem(d.ptr(), PyTuple_GET_ITEM(kwnames, static_cast<Py_ssize_t>(i - npos)), objects[i].ptr());
    }
    return d;
  }
};

// The operator's arguments as Python objects, taken off the stack.
PyArgs pop_python_args(const c10::FunctionSchema& schema, torch::jit::Stack* stack,
                       std::optional<PyObject*>& names_cache) {
  const auto& params = schema.arguments();
  const size_t first = stack->size() - params.size();
  PyArgs out;
  while (out.npos < params.size() && !params[out.npos].kwarg_only()) {
    ++out.npos;
  }
  if (out.npos < params.size()) {
    out.kwnames = kwarg_names(schema, names_cache);  // kwarg-only arguments follow the positional ones
  }
  for (size_t i = 0; i < params.size(); ++i) {
    out.objects.push_back(torch::jit::toPyObject(std::move((*stack)[first + i])));
  }
  stack->erase(stack->begin() + first, stack->end());
  return out;
}

void push_python_result(const c10::FunctionSchema& schema, const py::object& result, torch::jit::Stack* stack) {
  const auto& returns = schema.returns();
  if (returns.size() == 1) {
    stack->push_back(torch::jit::toIValue(result, returns[0].real_type()));
  } else if (!returns.empty()) {
    auto items = py::reinterpret_borrow<py::sequence>(result);
    TORCH_CHECK(static_cast<size_t>(py::len(items)) == returns.size(), "flagos: the routed kernel of ",
                schema.name(), " returned ", std::to_string(py::len(items)), " values, the operator has ",
                std::to_string(returns.size()));
    for (size_t i = 0; i < returns.size(); ++i) {
      stack->push_back(torch::jit::toIValue(items[i], returns[i].real_type()));
    }
  }
}

// One call of a route, counted in its cell with the GIL held. (A Python int
// in a list cost an int object and a list store per call, H200, 2026-12-01.)
inline void count_call(PyRouteState& st) {
  ++*st.calls;
}

class PyRouteKernel final : public c10::OperatorKernel {
 public:
  // The state is read and swapped only with the GIL held (update() is
  // called from Python), so a plain shared_ptr copy needs no atomics.
  using Slot = std::shared_ptr<std::shared_ptr<PyRouteState>>;
  explicit PyRouteKernel(Slot slot) : slot_(std::move(slot)) {}

  // For a typed front (GIL held): the state a call starts with, and the
  // operator's keyword-only argument names.
  std::shared_ptr<PyRouteState> state() const {
    return *slot_;
  }
  PyObject* kwnames(const c10::FunctionSchema& schema) {
    return kwarg_names(schema, kwarg_names_);
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const auto& schema = op.schema();
    const size_t nargs = schema.arguments().size();
    // Everything below holds the GIL, to the end: dropping the last C++
    // reference to a tensor that Python also held (the caller's arguments,
    // their aliases once passed to Python) decrefs its PyObject, which
    // would take the GIL again for each of them. Through a typed front
    // (PyFront) the GIL is held already and this is a re-entrant acquire.
    GilHeld gil;
    RoutedArgs routed(python_alias_pool());
    {
      // A route change may swap the state during this call (a fallback
      // re-plans its own operator): the call keeps the state it started with.
      std::shared_ptr<PyRouteState> st = *slot_;
      if (C10_UNLIKELY(g_route_flags.log_dispatch)) {  // one switch for every route (set_flags)
        std::cerr << st->line << std::flush;
      }
      const c10::ScalarType dtype = first_dtype(*stack, stack->size() - nargs);
      if (C10_UNLIKELY(dtype != c10::ScalarType::Undefined && st->other[static_cast<size_t>(dtype)])) {
        push_python_result(schema, pop_python_args(schema, stack, kwarg_names_).call(st->other_dtype), stack);
        return;
      }
      if (st->on_empty && C10_UNLIKELY(has_empty_input(schema, *stack, stack->size() - nargs))) {
        push_python_result(schema, pop_python_args(schema, stack, kwarg_names_).call(st->on_empty), stack);
        return;
      }
      // The caller's arguments, for the error path.
      c10::SmallVector<c10::IValue, 8> original(stack->end() - nargs, stack->end());
      routed.unwrap(stack, nargs);
      count_call(*st);
      const PyArgs py_args = pop_python_args(schema, stack, kwarg_names_);
      py::object result;
      try {
        // Launch on the arguments' device (a flagos stream is a CUDA stream).
        c10::OptionalDeviceGuard guard;
        if (routed.index() >= 0 && routed.index() != current_device()) {
          guard.reset_device(c10::Device(kFlagos, routed.index()));
        }
        result = py_args.call(st->fn);
      } catch (py::error_already_set& e) {
        stack->insert(stack->end(), original.begin(), original.end());
        const PyArgs caller = pop_python_args(schema, stack, kwarg_names_);
        push_python_result(schema, st->on_error(e.value(), caller.args_tuple(), caller.kwargs_dict()), stack);
        return;  // the policy returned flagos results, or raised
      }
      push_python_result(schema, result, stack);
    }
    routed.finish(schema, stack);
  }

 private:
  Slot slot_;
  std::optional<PyObject*> kwarg_names_;  // filled on the first call, with the GIL
};

// ------------------------------------------------------------ typed fronts
// A Python argument of a typed call: flagos tensors as their borrowed
// aliases (from the Python pool), the rest as the boxed route converts them.
template <class T>
py::object py_arg(RoutedArgs&, const T& v) {
  return torch::jit::toPyObject(c10::IValue(v));
}
// A scalar argument (add's alpha) as the Python number the boxed route makes
// of it, without the IValue round trip for the common kinds.
py::object py_arg(RoutedArgs&, const c10::Scalar& v) {
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
py::object py_arg(RoutedArgs& a, const at::Tensor& t) {
  const c10::MaybeOwned<at::Tensor> given = a.arg(t);  // a flagos tensor's alias; another itself, noted as foreign
  if (given->unsafeGetTensorImpl() != t.unsafeGetTensorImpl()) {
    return py_tensor(*given);
  }
  // As the boxed route hands them over: a scalar operand (x - 1 passes a
  // wrapped-number tensor) as the Python number it was.
  return torch::jit::toPyObject(c10::IValue(t));
}
py::object py_arg(RoutedArgs& a, const std::optional<at::Tensor>& t) {
  return t.has_value() ? py_tensor(a.arg_value(*t)) : py::none();
}
template <class List>
py::object py_list(RoutedArgs& a, const List& list) {
  py::list out(list.size());
  size_t i = 0;
  for (const at::Tensor& t : list) {
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i++), py_tensor(a.arg_value(t)).release().ptr());
  }
  return out;
}
py::object py_arg(RoutedArgs& a, at::TensorList list) {
  return py_list(a, list);
}
py::object py_arg(RoutedArgs& a, const at::ITensorListRef& list) {
  return py_list(a, list);
}
py::object py_arg(RoutedArgs& a, const c10::List<std::optional<at::Tensor>>& list) {
  py::list out(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::optional<at::Tensor> t = list.get(i);
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), py_arg(a, t).release().ptr());
  }
  return out;
}
py::object py_arg(RoutedArgs& a, std::optional<at::Device> d) {
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

// A typed front on PyRoute, for the operators of typed_ops.h. Called through
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
    GilHeld gil;
    // A route change may swap the state during this call: the call keeps the state it started with.
    std::shared_ptr<PyRouteState> st = route->state();
    if (C10_UNLIKELY(st->any_other && other_dtype(*st, args...)) ||
        C10_UNLIKELY(st->on_empty && has_empty(args...))) {
      return c10::impl::BoxedKernelWrapper<Ret(Args...)>::call(
          *kernel, *handle, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), std::forward<Args>(args)...);
    }
    if (C10_UNLIKELY(g_route_flags.log_dispatch)) {
      std::cerr << st->line << std::flush;
    }
    count_call(*st);
    RoutedArgs routed(python_alias_pool());
    routed.reserve((typed::tensors_in(args) + ... + size_t{0}));
    c10::SmallVector<py::object, 8> objects;
    (objects.push_back(py_arg(routed, args)), ...);  // left to right: the first flagos tensor names the device
    py::object result = call_fn(*st, objects, routed.index());
    if (C10_UNLIKELY(!result)) {
      py::error_already_set error;
      objects.clear();
      return on_error(*st, error, args...);
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
      Ret out = typed::wrap(routed, c10::impl::PopResult<Ret>::call(stack));
      routed.release();
      return out;
    }
  }

  static void install(torch::Library& lib, const char* op, PyRouteKernel::Slot slot) {
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
  static py::object call_fn(const PyRouteState& st, const c10::SmallVector<py::object, 8>& objects,
                            c10::DeviceIndex index) {
    // Launch on the arguments' device (a flagos stream is a CUDA stream).
    c10::OptionalDeviceGuard guard;
    if (index >= 0 && index != current_device()) {
      guard.reset_device(c10::Device(kFlagos, index));
    }
    return vectorcall(st.fn, objects, npos, kwnames);
  }

  static bool other_dtype(const PyRouteState& st, const Args&... args) {
    const at::Tensor* first = nullptr;
    ((first = first == nullptr ? first_tensor(args) : first), ...);
    return first != nullptr && st.other[static_cast<size_t>(first->scalar_type())];
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
  static at::Tensor& self(Args&... args) {
    return std::get<0>(std::forward_as_tuple(args...));
  }

  // fn raised: the routing layer's policy decides (a fallback, once logged,
  // or the error), given the caller's own arguments.
  static Ret on_error(const PyRouteState& st, py::error_already_set& error, Args&... args) {
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
    py::object result = st.on_error(error.value(), positional, keywords);
    torch::jit::Stack stack;
    push_python_result(handle->schema(), result, &stack);
    if constexpr (std::is_same_v<Ret, at::Tensor&>) {
      return self(args...);
    } else if constexpr (!std::is_void_v<Ret>) {
      return c10::impl::PopResult<Ret>::call(stack);  // flagos results already
    }
  }
};

using FrontInstaller = void (*)(torch::Library&, const char*, PyRouteKernel::Slot);

// The typed front of an operator, or nullptr where it has none.
FrontInstaller py_front(const std::string& op) {
  static const auto* fronts = [] {
    auto* m = new std::unordered_map<std::string, FrontInstaller>;  // leaked: used until exit
#define FLAGOS_PY_FRONT(op) (*m)[typed::overload_of<at::_ops::op>()] = &PyFront<at::_ops::op>::install;
    FLAGOS_TYPED_OPS(FLAGOS_PY_FRONT)
#undef FLAGOS_PY_FRONT
    return m;
  }();
  auto it = fronts->find(op);
  return it == fronts->end() ? nullptr : it->second;
}

struct NoWarnings final : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

// Python handle of one operator's PyRoute registration.
struct PyRoute {
  std::string op;
  PyRouteKernel::Slot slot = std::make_shared<std::shared_ptr<PyRouteState>>();
  torch::Library* library = nullptr;

  void update(py::object fn, py::object on_error, py::object other_dtype, const std::vector<py::object>& other,
              py::object on_empty, py::object cell, const std::string& label) {
    auto st = std::make_shared<PyRouteState>();
    st->fn = std::move(fn);
    st->on_error = std::move(on_error);
    st->other_dtype = std::move(other_dtype);
    if (!on_empty.is_none()) {
      st->on_empty = std::move(on_empty);
    }
    // The call counter: cell[0] of an array('q'), written through its buffer.
    if (PyObject_GetBuffer(cell.ptr(), &st->cell_view, PyBUF_WRITABLE | PyBUF_FORMAT) != 0) {
      PyErr_Clear();
      throw py::type_error("PyRoute.update: `cell` must be array('q', [calls, fallbacks, failures])");
    }
    const char* format = st->cell_view.format != nullptr ? st->cell_view.format : "B";
    if (st->cell_view.itemsize != 8 || st->cell_view.len < 3 * 8 || (format[0] != 'q' && format[0] != 'l')) {
      PyBuffer_Release(&st->cell_view);
      throw py::type_error("PyRoute.update: `cell` must be array('q', [calls, fallbacks, failures])");
    }
    st->calls = static_cast<int64_t*>(st->cell_view.buf);
    st->cell = std::move(cell);
    for (const auto& d : other) {
      TORCH_CHECK(THPDtype_Check(d.ptr()), "PyRoute.update: `other` must hold torch.dtype objects");
      st->other[static_cast<size_t>(reinterpret_cast<THPDtype*>(d.ptr())->scalar_type)] = true;
      st->any_other = true;
    }
    st->line = "[flagos dispatch] " + op + " -> " + label + "\n";
    // Registered once; later updates swap the state behind the kernel
    // (replacing a kernel that may be running is not safe). The GIL is held.
    *slot = std::move(st);
    if (library == nullptr) {
      NoWarnings quiet;  // overriding the native route's kernel is the point
      c10::WarningUtils::WarningHandlerGuard guard(&quiet);
      library = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
      if (FrontInstaller front = py_front(op)) {
        front(*library, op.c_str(), slot);
      } else {
        library->impl(op.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<PyRouteKernel>(slot)));
      }
    }
  }

  void destroy() {
    NoWarnings quiet;
    c10::WarningUtils::WarningHandlerGuard guard(&quiet);
    delete library;  // the native route takes the operator back
    library = nullptr;
  }
};

}  // namespace

void bind_py_route(py::module& m) {
  py::class_<PyRoute>(m, "PyRoute",
                      "PyRoute(op).update(fn, on_error, other_dtype, other, on_empty, cell, label): a C++ "
                      "PrivateUse1 kernel for aten::op that calls fn on native aliases (on_empty, unless None, "
                      "instead when an input tensor is empty); destroy() gives op back to the native route.")
      .def(py::init([](std::string op) { return PyRoute{std::move(op)}; }), py::arg("op"))
      .def("update", &PyRoute::update, py::arg("fn"), py::arg("on_error"), py::arg("other_dtype"), py::arg("other"),
           py::arg("on_empty"), py::arg("cell"), py::arg("label"))
      .def("destroy", &PyRoute::destroy)
      .def_property_readonly("registered", [](const PyRoute& r) { return r.library != nullptr; });
}

}  // namespace torch_fl
