// The boundary of a compiled flagos graph that runs on the backing device
// (python/graph_boundary.h). Plain METH_FASTCALL functions: a graph calls
// _graph_empty_strided for each of its buffers, hundreds per call.
#include "python/graph_boundary.h"

#include "ops/metadata_ops.h"
#include "python/python_args.h"
#include "route/routed_args.h"
#include "runtime/allocator.h"
#include "runtime/device.h"
#include "tensor/alias.h"

#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/object_ptr.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/python_numbers.h>

#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <atomic>

namespace torch_fl {
namespace python {

namespace {

using runtime::g_backing;

std::atomic<bool> g_graphs_native{true};
// The mode of the graph this thread runs: set at each graph's entry. A graph
// that raised leaves it set, which only the next graph's entry reads.
thread_local bool t_native = false;

bool is_flagos(PyObject* obj) {
  return THPVariable_Check(obj) && THPVariable_Unpack(obj).device().type() == kFlagos;
}

}  // namespace

void set_graphs_native(bool native) {
  g_graphs_native.store(native, std::memory_order_relaxed);
}

PyObject* graph_inputs(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 2 && PyList_Check(args[0]), "torch_fl._C._graph_inputs(args: list, native_ok: bool)");
  PyObject* list = args[0];
  t_native = PyObject_IsTrue(args[1]) == 1 && g_graphs_native.load(std::memory_order_relaxed);
  const Py_ssize_t n = PyList_GET_SIZE(list);
  THPObjectPtr out(PyTuple_New(n));
  if (!out) {
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PyList_GET_ITEM(list, i);
    if (t_native && is_flagos(item)) {
      // Owning: inductor's wrapper drops each input at its last use, and the caller's list is cleared, so the
      // alias keeps the flagos storage alive as the input did.
      PyObject* alias = THPVariable_Wrap(tensor::native_alias(THPVariable_Unpack(item), /*owning=*/true));
      if (alias == nullptr) {
        return nullptr;
      }
      PyTuple_SET_ITEM(out.get(), i, alias);
    } else {
      Py_INCREF(item);
      PyTuple_SET_ITEM(out.get(), i, item);
    }
  }
  if (PyList_SetSlice(list, 0, n, nullptr) != 0) {
    return nullptr;
  }
  return out.release();
  END_HANDLE_TH_ERRORS
}

PyObject* graph_empty_strided(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  const EmptyStridedArgs a = parse_empty_strided(args, nargs, "_graph_empty_strided");
  if (!t_native) {
    return THPVariable_Wrap(ops::empty_strided_on(a.size, a.stride, a.dtype, a.index));
  }
  const runtime::Backing& b = g_backing;
  if (b.host) {
    // Host memory is counted as flagos memory only when the flagos allocator made it (memory_stats() would miss a
    // graph's buffers): a flagos buffer, handed out as its alias (an output maps back to it).
    return THPVariable_Wrap(
        tensor::native_alias(ops::empty_strided_on(a.size, a.stride, a.dtype, a.index), /*owning=*/true));
  }
  // A GPU's flagos memory is its caching allocator's, counted there. That allocator allocates on the current
  // device: a guard only for a buffer of another one.
  std::optional<c10::DeviceGuard> guard;
  if (a.index >= 0 && a.index != runtime::current_device()) {
    guard.emplace(c10::Device(kFlagos, a.index));
  }
  return THPVariable_Wrap(
      at::detail::empty_strided_generic(a.size, a.stride, b.allocator, c10::DispatchKeySet(b.key), a.dtype));
  END_HANDLE_TH_ERRORS
}

PyObject* graph_outputs(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 3 && PyList_Check(args[0]) && THPUtils_checkLong(args[1]) && PyTuple_Check(args[2]),
                   "torch_fl._C._graph_outputs(outputs: list, index: int, flagos: tuple of positions)");
  PyObject* list = args[0];
  const Py_ssize_t n = PyList_GET_SIZE(list);
  if (!t_native) {
    return PyList_AsTuple(list);
  }
  const auto index = static_cast<c10::DeviceIndex>(THPUtils_unpackLong(args[1]));
  PyObject* positions = args[2];
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(positions); ++k) {
    const Py_ssize_t i = THPUtils_unpackLong(PyTuple_GET_ITEM(positions, k));
    TORCH_CHECK(i >= 0 && i < n, "torch_fl._C._graph_outputs: position ", i, " of ", n, " outputs");
    PyObject* item = PyList_GET_ITEM(list, i);
    if (!THPVariable_Check(item) || THPVariable_Unpack(item).device().type() != g_backing.type) {
      continue;  // not a tensor of the backing device (None, or already flagos)
    }
    // The list's reference moves here: a fresh buffer that only the list held (the wrapper deleted its name) is
    // then held by `held` alone, so it is retagged in place and keeps its Python object.
    THPObjectPtr held(item);
    Py_INCREF(Py_None);
    PyList_SET_ITEM(list, i, Py_None);
    at::Tensor native = THPVariable_Unpack(item);
    PyObject* result = THPVariable_Wrap(route::adopt_result(std::move(native), index, /*gil_held=*/true));
    if (result == nullptr) {
      return nullptr;
    }
    PyList_SET_ITEM(list, i, result);  // in place of the None put there
    Py_DECREF(Py_None);
  }
  return PyList_AsTuple(list);
  END_HANDLE_TH_ERRORS
}

}  // namespace python
}  // namespace torch_fl
