// Python arguments and results of a routed call (python/python_args.h).
#include "python/python_args.h"

#include "ops/metadata_ops.h"
#include "route/native_route.h"
#include "runtime/device.h"

#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/python_numbers.h>

#include <ATen/ScalarOps.h>
#include <c10/util/SmallVector.h>

#include <algorithm>

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

namespace {

// Python kernels and the routing policy see a scalar operand (x - 1 passes a
// wrapped-number tensor) as the Python number it was (torch::jit::toPyObject);
// handed back for a Tensor argument, it becomes that wrapped number again.
py::tuple numbers_as_tensors(const c10::FunctionSchema& schema, const py::args& args) {
  const auto& params = schema.arguments();
  py::tuple out(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    py::object a = args[i];
    PyObject* o = a.ptr();
    if (i < params.size() && params[i].type()->kind() == c10::TypeKind::TensorType &&
        (PyBool_Check(o) || PyLong_Check(o) || PyFloat_Check(o) || PyComplex_Check(o))) {
      const c10::Scalar value = PyBool_Check(o) ? c10::Scalar(o == Py_True)
                                                : torch::jit::toIValue(a, c10::NumberType::get()).toScalar();
      at::Tensor t = c10::scalar_to_tensor(value);
      t.unsafeGetTensorImpl()->set_wrapped_number(true);
      a = py::reinterpret_steal<py::object>(THPVariable_Wrap(t));
    }
    PyTuple_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), a.release().ptr());
  }
  return out;
}

torch::jit::Stack stack_for(const c10::OperatorHandle& op, const py::args& args, const py::kwargs& kwargs) {
  return torch::jit::createStackForSchema(op.schema(), numbers_as_tensors(op.schema(), args), kwargs, std::nullopt);
}

}  // namespace

py::object run_native_from_python(const std::string& name, const std::string& overload, const py::args& args,
                                  const py::kwargs& kwargs) {
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(("aten::" + name).c_str(), overload.c_str());
  auto stack = stack_for(op, args, kwargs);
  {
    py::gil_scoped_release no_gil;
    route::run_native_route(op, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), &stack);
  }
  return torch::jit::createPyObjectForStack(std::move(stack));
}

py::object call_dtype(const std::string& name, const std::string& overload, const py::args& args,
                      const py::kwargs& kwargs) {
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(("aten::" + name).c_str(), overload.c_str());
  const c10::ScalarType dtype = first_dtype(stack_for(op, args, kwargs), 0);
  if (dtype == c10::ScalarType::Undefined) {
    return py::none();
  }
  return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(dtype)));
}

namespace {

// A size or stride tuple (or list) of Python ints, as inductor writes them.
void read_ints(PyObject* seq, c10::SmallVector<int64_t, 8>& out, const char* fn, const char* what) {
  TORCH_CHECK_TYPE(PyTuple_Check(seq) || PyList_Check(seq), "torch_fl._C.", fn, ": ", what,
                   " must be a tuple of ints, got ", Py_TYPE(seq)->tp_name);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  out.resize(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    TORCH_CHECK_TYPE(THPUtils_checkLong(items[i]), "torch_fl._C.", fn, ": ", what, " must be a tuple of ints, got ",
                     Py_TYPE(items[i])->tp_name, " at position ", i);
    out[i] = THPUtils_unpackLong(items[i]);
  }
}

}  // namespace

EmptyStridedArgs parse_empty_strided(PyObject* const* args, Py_ssize_t nargs, const char* fn) {
  TORCH_CHECK_TYPE(nargs == 4, "torch_fl._C.", fn, "(size, stride, dtype, index) takes 4 arguments, got ", nargs);
  EmptyStridedArgs a;
  read_ints(args[0], a.size, fn, "size");
  read_ints(args[1], a.stride, fn, "stride");
  TORCH_CHECK_TYPE(THPDtype_Check(args[2]), "torch_fl._C.", fn, ": dtype must be a torch.dtype, got ",
                   Py_TYPE(args[2])->tp_name);
  TORCH_CHECK_TYPE(THPUtils_checkLong(args[3]), "torch_fl._C.", fn, ": index must be an int");
  TORCH_CHECK(a.size.size() == a.stride.size(), "torch_fl._C.", fn, ": ", a.size.size(), " sizes and ",
              a.stride.size(), " strides");
  a.dtype = reinterpret_cast<THPDtype*>(args[2])->scalar_type;
  a.index = static_cast<c10::DeviceIndex>(std::clamp<int64_t>(THPUtils_unpackLong(args[3]), -1, runtime::kMaxDevices));
  return a;
}

}  // namespace python
}  // namespace torch_fl
