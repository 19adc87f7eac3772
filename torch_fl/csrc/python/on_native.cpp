// OnNative: calls a Python function (a FlagGems kernel) on native aliases of
// its flagos arguments and returns flagos results, walking the arguments once
// in C++ (python/on_native.h).
#include "python/on_native.h"

#include "runtime/device.h"
#include "tensor/alias.h"

#include <torch/csrc/autograd/python_variable.h>

#include <c10/core/DeviceGuard.h>
#include <c10/util/SmallVector.h>

namespace torch_fl {
namespace python {

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
      at::Tensor alias = tensor::native_alias(t, /*owning=*/true);
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
    if (!r.defined() || r.device().type() != runtime::g_backing.type) {
      return py::reinterpret_borrow<py::object>(obj);
    }
    for (const auto& s : walk.swaps) {
      if (r.unsafeGetTensorImpl() == s.alias.unsafeGetTensorImpl()) {
        return py::reinterpret_steal<py::object>(THPVariable_Wrap(s.flagos));
      }
    }
    return py::reinterpret_steal<py::object>(
        THPVariable_Wrap(tensor::flagos_alias(r, walk.index < 0 ? runtime::current_device() : walk.index)));
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
          if (walk.index >= 0 && walk.index != runtime::current_device()) {
            guard.reset_device(c10::Device(kFlagos, walk.index));
          }
          result = self.fn(*nargs, **nkwargs);
        }
        // out= arguments the kernel resized or re-pointed.
        for (const auto& s : walk.swaps) {
          tensor::sync_back_if_changed(s.flagos, s.alias, s.alias_storage);
        }
        return to_flagos(result, walk);
      });
}

}  // namespace python
}  // namespace torch_fl
