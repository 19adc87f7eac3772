// Python arguments and results of a routed call (python/python_args.h).
#include "python/python_args.h"

#include <torch/csrc/jit/python/pybind_utils.h>

#include <string>

namespace torch_fl {
namespace python {

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

int64_t first_numel(const torch::jit::Stack& stack, size_t first) {
  for (size_t i = first; i < stack.size(); ++i) {
    if (stack[i].isTensor()) {
      const at::Tensor& t = stack[i].toTensor();
      return t.defined() ? t.numel() : 0;
    }
    if (stack[i].isTensorList()) {
      auto list = stack[i].toTensorList();
      if (list.size() > 0) {
        const at::Tensor t = list.get(0);
        return t.defined() ? t.numel() : 0;
      }
    }
  }
  return 0;
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

py::tuple PyArgs::args_tuple() const {
  py::tuple t(npos);
  for (size_t i = 0; i < npos; ++i) {
    PyTuple_SET_ITEM(t.ptr(), static_cast<Py_ssize_t>(i), py::object(objects[i]).release().ptr());
  }
  return t;
}

py::dict PyArgs::kwargs_dict() const {
  py::dict d;
  for (size_t i = npos; i < objects.size(); ++i) {
    PyDict_SetItem(d.ptr(), PyTuple_GET_ITEM(kwnames, static_cast<Py_ssize_t>(i - npos)), objects[i].ptr());
  }
  return d;
}

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

}  // namespace python
}  // namespace torch_fl
