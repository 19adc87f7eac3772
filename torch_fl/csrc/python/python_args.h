// A boxed call's arguments as Python objects, laid out for a vectorcall, and
// a Python kernel's result back on the stack: what PyRoute's boxed kernel and
// its typed fronts share.
#pragma once

#include <torch/csrc/utils/pybind.h>

#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <optional>

namespace torch_fl {
namespace python {

// The dtype of the call's first tensor (or first tensor of a list) from
// stack[first] on; Undefined when it has none.
c10::ScalarType first_dtype(const torch::jit::Stack& stack, size_t first);

// The element count of that same tensor (the one first_dtype reads); 0 when
// the call has none. Read only for operators with size rules.
int64_t first_numel(const torch::jit::Stack& stack, size_t first);

// Whether an input of the call (a tensor, or a tensor of a list; not an
// argument the operator writes, such as an out= tensor it will resize) is empty.
bool has_empty_input(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t first);

// An operator's keyword-only argument names as a tuple of interned Python
// strings, the `kwnames` of a vectorcall; made once per kernel and kept for
// the process's life (dropping it would need the GIL at exit). Null when the
// operator has no keyword-only arguments.
PyObject* kwarg_names(const c10::FunctionSchema& schema, std::optional<PyObject*>& cache);

// fn(*objects[:npos], **dict(zip(kwnames, objects[npos:]))) by vectorcall;
// null with the Python error set when fn raised.
py::object vectorcall(const py::object& fn, const c10::SmallVector<py::object, 8>& objects, size_t npos,
                      PyObject* kwnames);

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
  py::tuple args_tuple() const;
  py::dict kwargs_dict() const;
};

// The operator's arguments as Python objects, taken off the stack.
PyArgs pop_python_args(const c10::FunctionSchema& schema, torch::jit::Stack* stack,
                       std::optional<PyObject*>& names_cache);

// A Python kernel's result, converted by the schema's return types, pushed.
void push_python_result(const c10::FunctionSchema& schema, const py::object& result, torch::jit::Stack* stack);

// Calls of an aten operator from Python arguments, outside the dispatcher
// (torch_fl._C's _run_native and _call_dtype): a Python number given for a
// Tensor parameter becomes the wrapped-number tensor the dispatcher would
// have made.
//
// aten::<name>.<overload> on the native route as a plain function (the
// backing device's kernel on zero-copy aliases; the CPU fallback where it has
// none), logged and counted as the native route; its results.
py::object run_native_from_python(const std::string& name, const std::string& overload, const py::args& args,
                                  const py::kwargs& kwargs);
// The dtype such a call is routed by (PyRoute's first_dtype), or None.
py::object call_dtype(const std::string& name, const std::string& overload, const py::args& args,
                      const py::kwargs& kwargs);

// The arguments of torch_fl._C._graph_empty_strided(size, stride, dtype,
// index) (python/graph_boundary.h), read in place from Python's tuples (as
// Dynamo's empty_strided_cuda does), not converted to vectors by pybind; `fn`
// names the function in errors.
struct EmptyStridedArgs {
  c10::SmallVector<int64_t, 8> size;
  c10::SmallVector<int64_t, 8> stride;
  at::ScalarType dtype = at::ScalarType::Undefined;
  c10::DeviceIndex index = -1;
};
EmptyStridedArgs parse_empty_strided(PyObject* const* args, Py_ssize_t nargs, const char* fn);

}  // namespace python
}  // namespace torch_fl
