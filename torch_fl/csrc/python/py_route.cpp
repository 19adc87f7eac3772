// PyRoute's Python handle and its registration (python/py_route.h).
#include "python/py_route.h"

#include "python/typed_fronts.h"

#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/library.h>

#include <algorithm>
#include <unordered_map>

namespace torch_fl {
namespace python {

namespace {

py::object dtype_object(c10::ScalarType dtype) {
  if (dtype == c10::ScalarType::Undefined) {
    return py::none();
  }
  return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(dtype)));
}

}  // namespace

void call_notice(const py::object& notice, c10::ScalarType dtype) {
  notice(dtype_object(dtype));
}

py::object PyRouteKernel::call_on_error(const Target& t, py::error_already_set& e, c10::ScalarType dtype,
                                        const py::tuple& args, const py::dict& kwargs) {
  // The policy reads where the exception came from (a signal handler's
  // frame): pybind11 keeps the traceback apart from the value.
  PyObject* tb = PyException_GetTraceback(e.value().ptr());  // a new reference, or null
  if (tb == nullptr && e.trace()) {
    PyException_SetTraceback(e.value().ptr(), e.trace().ptr());
  }
  Py_XDECREF(tb);
  return t.on_error(e.value(), dtype_object(dtype), args, kwargs);
}

namespace {

struct NoWarnings final : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

// A routing-layer CoreTarget (torch_fl/routing/types.py) as the kernel runs it.
std::unique_ptr<Target> make_target(const std::string& op, const py::handle& spec) {
  auto t = std::make_unique<Target>();
  const auto kind = spec.attr("kind").cast<std::string>();
  const auto label = spec.attr("label").cast<std::string>();
  t->label = label;
  t->line = "[flagos dispatch] " + op + " -> " + label + "\n";
  auto callable = [&](const char* name, bool required) {
    py::object o = spec.attr(name);
    if (o.is_none() && !required) {
      return py::object();
    }
    if (!PyCallable_Check(o.ptr())) {
      throw py::type_error("PyRoute.update: a '" + kind + "' target needs a callable `" + name + "`");
    }
    return o;
  };
  if (kind == "native") {
    t->kind = TargetKind::kNative;
  } else if (kind == "cpu_fallback") {
    t->kind = TargetKind::kCpuFallback;
  } else if (kind == "fallback") {
    t->kind = TargetKind::kFallback;
    t->notice = callable("notice", true);
  } else if (kind == "kernel") {
    t->kind = TargetKind::kKernel;
    t->fn = callable("fn", true);
    t->replay = py::hasattr(spec, "replay") && spec.attr("replay").cast<bool>();
    t->on_error = callable("on_error", true);
    t->notice = callable("notice", false);
    // The call counter: counters[0] of an array('q'), written through its buffer.
    py::object counters = spec.attr("counters");
    const char* bad = "PyRoute.update: a 'kernel' target's `counters` must be array('q', [calls, fallbacks, failures])";
    if (PyObject_GetBuffer(counters.ptr(), &t->counters_view, PyBUF_WRITABLE | PyBUF_FORMAT) != 0) {
      PyErr_Clear();
      throw py::type_error(bad);
    }
    const char* format = t->counters_view.format != nullptr ? t->counters_view.format : "B";
    if (t->counters_view.itemsize != 8 || t->counters_view.len < 3 * 8 || (format[0] != 'q' && format[0] != 'l')) {
      PyBuffer_Release(&t->counters_view);
      throw py::type_error(bad);
    }
    t->calls = static_cast<int64_t*>(t->counters_view.buf);
    t->counters = std::move(counters);
  } else {
    throw py::value_error("PyRoute.update: unknown target kind '" + kind +
                          "' (native, cpu_fallback, fallback or kernel)");
  }
  return t;
}

// One operator's PyRoute: registered at its first non-native plan and kept
// for the process (another thread may be running the kernel). One per
// operator, whoever asks for it (the routing layer, a test): a second
// registration would shadow the first.
struct Registered {
  Slot slot = std::make_shared<RouteSlot>();
  torch::Library* library = nullptr;
};

Registered& registered(const std::string& op) {
  // Leaked: used until exit. Read and written with the GIL held.
  static auto* all = new std::unordered_map<std::string, Registered>;
  return (*all)[op];
}

// The Python handle of an operator's PyRoute.
struct PyRoute {
  std::string op;
  Registered* reg;

  explicit PyRoute(std::string name) : op(std::move(name)), reg(&registered(op)) {}

  using SizeList = std::vector<std::pair<int64_t, py::object>>;
  using ValueList = std::vector<std::tuple<py::object, py::object, SizeList>>;  // (value, target, size classes)

  void update(const py::handle& default_target, const std::vector<std::pair<py::object, py::object>>& by_dtype,
              const std::vector<std::pair<py::object, SizeList>>& by_size, int64_t arg_index,
              const std::vector<std::pair<py::object, ValueList>>& by_value) {
    auto st = std::make_shared<PyRouteState>();
    st->targets.push_back(make_target(op, default_target));
    size_t n = by_dtype.size();
    size_t lists = by_size.size();
    for (const auto& [dtype, classes] : by_size) {
      n += classes.size();
    }
    for (const auto& [dtype, classes] : by_value) {
      for (const auto& [value, spec, sizes] : classes) {
        n += 1 + sizes.size();
        lists += 1;
      }
    }
    TORCH_CHECK(n < 255 && lists < 255 && by_value.size() < 255,
                "PyRoute.update: too many per-dtype, per-size or per-value targets");
    TORCH_CHECK(by_value.empty() || arg_index >= 0, "PyRoute.update: value classes need the argument's index");
    auto scalar_type = [](const py::object& dtype, const char* what) {
      TORCH_CHECK(THPDtype_Check(dtype.ptr()), "PyRoute.update: `", what, "` must pair torch.dtype objects");
      return static_cast<size_t>(reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type);
    };
    for (const auto& [dtype, spec] : by_dtype) {
      st->of_dtype[scalar_type(dtype, "by_dtype")] = static_cast<uint8_t>(st->targets.size());
      st->targets.push_back(make_target(op, spec));
      st->any_dtype = true;
    }
    // Size classes of one dtype, or (dtype None) of every dtype without a target or classes of its own.
    const SizeList* any_dtype_sizes = nullptr;
    for (const auto& [dtype, classes] : by_size) {
      if (dtype.is_none()) {
        any_dtype_sizes = &classes;
        continue;
      }
      st->sizes_of[scalar_type(dtype, "by_size")] = add_sizes(*st, classes);
    }
    // Value classes likewise (before the dtype-less size classes are handed out: they decide which dtypes have
    // none of their own); dtype None's also serve calls without a tensor argument.
    st->arg_index = arg_index;
    const ValueList* any_dtype_values = nullptr;
    for (const auto& [dtype, classes] : by_value) {
      if (dtype.is_none()) {
        any_dtype_values = &classes;
        continue;
      }
      st->values_of[scalar_type(dtype, "by_value")] = add_values(*st, classes);
    }
    if (any_dtype_values != nullptr) {
      const uint8_t v = add_values(*st, *any_dtype_values);
      for (size_t d = 0; d < st->sizes_of.size(); ++d) {
        if (st->of_dtype[d] == 0 && st->sizes_of[d] == 0 && st->values_of[d] == 0) {
          st->values_of[d] = v;
        }
      }
      st->values_of[PyRouteState::value_slot(c10::ScalarType::Undefined)] = v;
    }
    if (any_dtype_sizes != nullptr) {
      const uint8_t s = add_sizes(*st, *any_dtype_sizes);
      for (size_t d = 0; d < st->sizes_of.size(); ++d) {
        if (st->of_dtype[d] == 0 && st->sizes_of[d] == 0) {
          st->sizes_of[d] = s;
        }
      }
    }
    const bool native = !st->any_dtype && !st->any_size && st->targets[0]->kind == TargetKind::kNative;
    if (native) {
      set_native();
      return;
    }
    // The GIL is held: calls read the state with it.
    update_replay(*st);
    reg->slot->state = std::move(st);
    reg->slot->native.store(false, std::memory_order_relaxed);
    if (reg->library == nullptr) {
      NoWarnings quiet;  // overriding the native route's kernel is the point
      c10::WarningUtils::WarningHandlerGuard guard(&quiet);
      reg->library =
          new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
      if (FrontInstaller front = py_front(op)) {
        front(*reg->library, op.c_str(), reg->slot);
      } else {
        reg->library->impl(op.c_str(),
                           torch::CppFunction::makeFromBoxedFunctor(std::make_unique<PyRouteKernel>(reg->slot)));
      }
    }
  }

  // One dtype's size classes (min_numel, target spec), largest threshold first; 1 + their index in st.sizes.
  uint8_t add_sizes(PyRouteState& st, const SizeList& classes) {
    std::vector<SizeClass> list;
    for (const auto& [min_numel, spec] : classes) {
      TORCH_CHECK(min_numel > 0, "PyRoute.update: a size class needs min_numel > 0, got ", min_numel);
      list.push_back({min_numel, static_cast<uint8_t>(st.targets.size())});
      st.targets.push_back(make_target(op, spec));
    }
    if (list.empty()) {
      return 0;
    }
    std::sort(list.begin(), list.end(), [](const SizeClass& a, const SizeClass& b) {
      return a.min_numel > b.min_numel;
    });
    st.sizes.push_back(std::move(list));
    st.any_size = st.any_dtype = true;
    return static_cast<uint8_t>(st.sizes.size());
  }

  // One dtype's value classes (value, target spec, size classes); 1 + their index in st.values.
  uint8_t add_values(PyRouteState& st, const ValueList& classes) {
    std::vector<ValueClass> list;
    for (const auto& [value, spec, sizes] : classes) {
      ValueClass c{};
      if (py::isinstance<py::bool_>(value) || py::isinstance<py::int_>(value)) {
        c.ivalue = value.cast<int64_t>();
        c.value = static_cast<double>(c.ivalue);
        c.integral = true;
      } else {
        TORCH_CHECK(py::isinstance<py::float_>(value), "PyRoute.update: a value class needs a number, got ",
                    py::repr(value).cast<std::string>());
        c.value = value.cast<double>();
      }
      c.target = static_cast<uint8_t>(st.targets.size());
      st.targets.push_back(make_target(op, spec));
      c.sizes = sizes.empty() ? 0 : add_sizes(st, sizes);
      list.push_back(c);
    }
    if (list.empty()) {
      return 0;
    }
    st.values.push_back(std::move(list));
    st.any_value = st.any_dtype = true;
    return static_cast<uint8_t>(st.values.size());
  }

  // Which dtypes are replayed (read without the GIL by every call).
  void update_replay(const PyRouteState& st) {
    ReplayPlan& f = reg->slot->replay;
    const Target* replayed = nullptr;
    auto is_replayed = [](const Target& t) { return t.kind == TargetKind::kKernel && t.replay; };
    auto mark = [&](size_t i, c10::ScalarType dtype) {
      const Target* t = st.any_target(dtype, is_replayed);
      f.on_dtype[i].store(t != nullptr, std::memory_order_relaxed);
      replayed = t != nullptr ? t : replayed;
    };
    for (size_t d = 0; d < static_cast<size_t>(c10::ScalarType::NumOptions); ++d) {
      mark(d, static_cast<c10::ScalarType>(d));
    }
    mark(f.on_dtype.size() - 1, c10::ScalarType::Undefined);
    if (replayed == nullptr) {
      f.any.store(false, std::memory_order_relaxed);
      return;
    }
    // Recordings of another function (a test's FlagGems stand-in) are dropped. So are all recordings under
    // size or argument rules: a signature recorded in a class that now runs elsewhere would replay there.
    if (!replayed->fn.is(f.fn) || st.any_size || st.any_value) {
      f.any.store(false, std::memory_order_seq_cst);
      f.cache.clear();
      f.fn = replayed->fn;
    }
    if (f.line != replayed->line) {  // the same for every replayed target of an operator
      f.any.store(false, std::memory_order_seq_cst);
      f.line = replayed->line;
      f.label = replayed->label;
    }
    f.counters = replayed->counters;
    f.calls.store(replayed->calls, std::memory_order_relaxed);
    f.any.store(true, std::memory_order_release);
  }

  // Every call runs the native route again; the kernel stays registered.
  void set_native() {
    reg->slot->replay.any.store(false, std::memory_order_relaxed);
    reg->slot->native.store(true, std::memory_order_relaxed);
    reg->slot->state = nullptr;
  }
};

}  // namespace

void bind_py_route(py::module& m) {
  py::class_<PyRoute>(m, "PyRoute",
                      "PyRoute(op): the C++ PrivateUse1 kernel of a routed aten::op. update(default, by_dtype) "
                      "gives it a plan: CoreTarget-like objects (kind, label, fn, on_error, notice, counters), "
                      "the default and per dtype; set_native() hands every call to the native route again. "
                      "Registered at the first update and never removed.")
      .def(py::init([](std::string op) { return PyRoute(std::move(op)); }), py::arg("op"))
      .def("update", &PyRoute::update, py::arg("default"), py::arg("by_dtype") = std::vector<int>{},
           py::arg("by_size") = std::vector<int>{}, py::arg("arg_index") = -1, py::arg("by_value") = std::vector<int>{},
           "by_size: (dtype or None, [(min_numel, target), ...]) pairs: calls of that dtype (None: of every dtype "
           "without a target or size classes of its own) whose first tensor has at least min_numel elements run "
           "the target of the largest threshold they reach. by_value: (dtype or None, [(value, target, size "
           "classes), ...]) pairs: calls of that dtype whose argument arg_index (its index in the schema) equals "
           "value run that target, or its size classes.")
      .def("set_native", &PyRoute::set_native)
      .def_property_readonly("registered", [](const PyRoute& r) { return r.reg->library != nullptr; })
      .def_property_readonly("native", [](const PyRoute& r) { return r.reg->slot->native.load(); })
      .def("replay_stats", [](const PyRoute& r) { return replay_stats(r.reg->slot->replay); },
           "Record and replay's counts for this operator: hits (replayed calls), recorded, python (calls "
           "left on the Python function), evicted, signatures, programs, capacity, reasons {why: calls}.")
      .def_property(
          "replay_capacity", [](const PyRoute& r) { return r.reg->slot->replay.cache.capacity(); },
          [](const PyRoute& r, size_t n) { r.reg->slot->replay.cache.set_capacity(n); },
          "The most signatures this operator's replay keeps (the oldest goes first).");
}

}  // namespace python
}  // namespace torch_fl
