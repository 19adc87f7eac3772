// PyRoute's Python handle and its registration (python/py_route.h).
#include "python/py_route.h"

#include "python/typed_fronts.h"

#include <torch/csrc/Dtype.h>
#include <torch/library.h>

namespace torch_fl {
namespace python {

namespace {

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

}  // namespace python
}  // namespace torch_fl
