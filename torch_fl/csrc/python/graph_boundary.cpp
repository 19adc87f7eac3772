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
#include "tensor/impl_fields.h"

#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/object_ptr.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/python_numbers.h>

#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <vector>

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

namespace {

// A graph's entry aliases of its parameters, one slot per input position, kept from one call to the next (see
// graph_boundary.h). `impl` pins the address of the flagos TensorImpl the alias was made for (a weak reference
// keeps the allocation, so no other tensor can take that address while the slot names it); `alias` is the
// Python alias object, the slot's own reference.
struct EntrySlot {
  std::optional<c10::weak_intrusive_ptr<c10::TensorImpl>> impl;
  PyObject* alias = nullptr;
};
using EntrySlots = std::vector<EntrySlot>;
constexpr const char* kEntrySlots = "torch_fl.graph_entry_aliases";

void free_entry_slots(PyObject* capsule) {
  auto* slots = static_cast<EntrySlots*>(PyCapsule_GetPointer(capsule, kEntrySlots));
  for (EntrySlot& s : *slots) {
    Py_XDECREF(s.alias);
  }
  delete slots;
}

// A parameter: a leaf that requires grad, which its module holds for the whole call (inductor's wrapper drops
// its own references to inputs as it goes, so only such an input may be aliased without owning its storage).
// Plain, over memory of its own (not a native tensor's storage).
bool keeps_entry_alias(const at::Tensor& t) {
  const c10::TensorImpl& impl = *t.unsafeGetTensorImpl();
  if (!t.requires_grad() || !t.is_leaf() || !tensor::ImplFields::plain(impl) || t.is_conj() || t.is_neg() ||
      !impl.has_storage()) {
    return false;
  }
  const c10::StorageImpl* st = impl.unsafe_storage().unsafeGetStorageImpl();
  return st != nullptr && st->data_ptr().get_deleter() != &tensor::owning_native_deleter;
}

// The slot's alias still stands for `t`: made for this TensorImpl, held by nothing but the slot, over the same
// bytes with the same dtype and geometry (a parameter's .data, resize_ or set_ since then make a new one).
bool entry_alias_fits(const EntrySlot& s, const at::Tensor& t) {
  if (s.alias == nullptr || s.impl->_unsafe_get_target() != t.unsafeGetTensorImpl() || Py_REFCNT(s.alias) != 1) {
    return false;
  }
  const at::Tensor& alias = THPVariable_Unpack(s.alias);
  const c10::TensorImpl& a = *alias.unsafeGetTensorImpl();
  const c10::TensorImpl& f = *t.unsafeGetTensorImpl();
  const c10::StorageImpl* as = a.unsafe_storage().unsafeGetStorageImpl();
  const c10::StorageImpl* fs = f.unsafe_storage().unsafeGetStorageImpl();
  return alias.use_count() == 1 && as->data_ptr().get_deleter() == &tensor::borrowed_deleter &&
         as->data_ptr().get_context() == fs && as->data() == fs->data() && as->nbytes() == fs->nbytes() &&
         a.dtype() == f.dtype() && tensor::same_plain_geometry(a, f) && !alias.is_conj() && !alias.is_neg() &&
         (g_backing.host || a.device().index() == f.device().index());
}

// The entry alias of parameter `t` at slot `s`: the slot's own where it still fits, else a new one kept there.
PyObject* entry_alias(EntrySlot& s, const at::Tensor& t) {
  if (!entry_alias_fits(s, t)) {
    PyObject* made = THPVariable_Wrap(tensor::native_alias(t, /*owning=*/false));
    if (made == nullptr) {
      return nullptr;
    }
    // Off the garbage collector's lists: the slot may outlive the parameter, and nothing in Python should find
    // an alias over memory that was freed (the slot never hands it out again: `impl` no longer matches).
    PyObject_GC_UnTrack(made);
    Py_XDECREF(s.alias);
    s.alias = made;
    s.impl.emplace(t.getIntrusivePtr());
  }
  Py_INCREF(s.alias);
  return s.alias;
}

}  // namespace

PyObject* graph_entry_aliases(PyObject* /*module*/, PyObject* /*unused*/) {
  HANDLE_TH_ERRORS
  auto* slots = new EntrySlots();
  PyObject* capsule = PyCapsule_New(slots, kEntrySlots, &free_entry_slots);
  if (capsule == nullptr) {
    delete slots;
  }
  return capsule;
  END_HANDLE_TH_ERRORS
}

PyObject* graph_inputs(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE((nargs == 2 || nargs == 3) && PyList_Check(args[0]),
                   "torch_fl._C._graph_inputs(args: list, native_ok: bool[, aliases: _graph_entry_aliases()])");
  PyObject* list = args[0];
  t_native = PyObject_IsTrue(args[1]) == 1 && g_graphs_native.load(std::memory_order_relaxed);
  const Py_ssize_t n = PyList_GET_SIZE(list);
  EntrySlots* slots = nullptr;
  if (nargs == 3 && t_native) {
    slots = static_cast<EntrySlots*>(PyCapsule_GetPointer(args[2], kEntrySlots));
    if (slots == nullptr) {
      return nullptr;
    }
    if (slots->size() < static_cast<size_t>(n)) {
      slots->resize(n);
    }
  }
  THPObjectPtr out(PyTuple_New(n));
  if (!out) {
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PyList_GET_ITEM(list, i);
    if (t_native && is_flagos(item)) {
      const at::Tensor& t = THPVariable_Unpack(item);
      // A parameter: its alias of the last call where it still fits (making and dropping an alias and its
      // Python object per input was most of a small model's entry). Others: owning, since inductor's wrapper
      // drops each input at its last use and the caller's list is cleared, so the alias keeps the flagos
      // storage alive as the input did.
      PyObject* alias = slots != nullptr && keeps_entry_alias(t)
                            ? entry_alias((*slots)[i], t)
                            : THPVariable_Wrap(tensor::native_alias(t, /*owning=*/true));
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
