// The Python module torch_fl._C: its bindings, and the order in which
// _init() sets the device up.
#include "autograd/autograd_shortcut.h"
#include "ops/core_ops.h"
#include "ops/register.h"
#include "ops/sdpa.h"
#include "python/alias_objects.h"
#include "python/graph_boundary.h"
#include "python/py_route.h"
#include "python/python_args.h"
#include "python/replay_plan.h"
#include "python/work_future.h"
#include "route/counters.h"
#include "route/device_check.h"
#include "route/dtype_gaps.h"
#include "route/register.h"
#include "runtime/allocator.h"
#include "runtime/autograd_threads.h"
#include "runtime/device.h"
#include "runtime/generator.h"
#include "tensor/alias.h"
#include "tensor/alias_pool.h"

#include <torch/csrc/utils/pybind.h>

#include <ATen/Context.h>
#include <ATen/MapAllocator.h>

#include <algorithm>

namespace torch_fl {
namespace python {

namespace {

using runtime::backing;
using runtime::current_device;

// The backing device, then the device's own registrations, then the
// operator kernels: the metadata operations first (the native route skips
// operators that already have a PrivateUse1 kernel), the native route, then
// what sits above it (autocast, SDPA, the autograd shortcut).
void init(const std::string& backing_type, int64_t host_devices) {
  install_python_object_hooks();
  runtime::init(backing_type, host_devices);
  ops::register_metadata_ops();
  ops::register_unsupported_layouts();
  route::register_native_route();
  ops::register_autocast();
  ops::register_sdpa();
  autograd::register_autograd_shortcut();
}

}  // namespace

void bind_module(py::module& m) {
  m.doc() = "torch_fl C++ core: the flagos device over a native backing device";
  bind_py_route(m);
  bind_work_future(m);
  m.def("_init", &init, py::arg("backing"), py::arg("host_devices"));
  m.def("_backing", [] { return std::string(c10::DeviceTypeName(backing().type, true)); });
  m.def("_initialized", [] { return backing().initialized; });
  // PyTorch answers is_pinned() for the current accelerator only once the
  // accelerator's C++ lazy init has run (Context::isPinnedPtr); flagos is that
  // accelerator, so its Python lazy init runs the C++ one too.
  m.def("_lazy_init_device", [] { at::globalContext().lazyInitDevice(c10::DeviceType::PrivateUse1); });
  m.def("_device_count", [] { return static_cast<int64_t>(backing().count); });
  m.def("_device_type_code", [] { return static_cast<int>(kFlagos); });
  m.def("_current_device", [] { return static_cast<int64_t>(current_device()); });
  m.def("as_native", &tensor::as_native, py::arg("tensor"),
        "A tensor of the backing device over the same bytes as a flagos tensor (zero copy).");
  m.def("as_flagos", &tensor::as_flagos, py::arg("tensor"), py::arg("index") = -1,
        "A flagos tensor over the same bytes as a backing-device tensor (zero copy).");
  // Host shared memory (torch_fl/multiprocessing.py; runtime/allocator.h says what it is).
  m.def(
      "_host_shared_storage",
      [](const at::Storage& storage) -> py::object {
        c10::StorageImpl* shared = runtime::host_shared_storage(storage.unsafeGetStorageImpl());
        if (shared == nullptr) {
          return py::none();
        }
        // PyTorch's fd strategy maps with at::MapAllocator; its file_system one with libshm's allocator.
        const bool fd = at::MapAllocator::fromDataPtr(shared->data_ptr()) != nullptr;
        return py::make_tuple(at::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(shared)),
                              fd ? "file_descriptor" : "file_system");
      },
      py::arg("storage"),
      "(the CPU storage whose shared memory a host-backed flagos storage is, the sharing strategy that made it), "
      "or None when the storage is not in shared memory. Internal: the CPU storage must not be resized or "
      "re-shared with the other strategy (the flagos storage would keep its old address).");
  m.def(
      "_host_move_to_shared",
      [](const at::Storage& storage, const at::Storage& shared) {
        py::gil_scoped_release no_gil;
        runtime::host_move_to_shared(storage.unsafeGetStorageImpl(),
                                     c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(shared.unsafeGetStorageImpl()));
      },
      py::arg("storage"), py::arg("shared"),
      "Copy a host-backed flagos storage's bytes into `shared` (a CPU storage of the same size in shared memory) "
      "and make them its memory, in place.");
  m.def(
      "_host_wrap_shared",
      [](const at::Storage& shared, int64_t index) {
        const auto i = static_cast<c10::DeviceIndex>(std::clamp<int64_t>(index, -1, runtime::kMaxDevices));
        return at::Storage(runtime::host_wrap_shared(
            c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(shared.unsafeGetStorageImpl()),
            runtime::index_or_current(i)));
      },
      py::arg("shared"), py::arg("index"),
      "A flagos storage of flagos:index (-1: the current device) over the memory of `shared`, a CPU storage in "
      "shared memory.");
  m.def("_set_log_dispatch", [](bool on) { route::g_route_flags.log_dispatch = on; });
  m.def("_set_log_fallback", [](bool on) { route::g_route_flags.log_fallback = on; });
  m.def("_set_strict", [](bool on) { route::g_route_flags.strict = on; });
  m.def("_set_graphs_native", &set_graphs_native, py::arg("native"),
        "Whether compiled graphs may run their calls natively: every operator on its native route, nothing logged.");
  m.def("_set_checked_ops", &route::set_checked_ops, py::arg("names"),
        "The operators whose CUDA kernels check every tensor's device, or (\"op:arg,arg\") the arguments whose "
        "device a kernel checks itself (torch_fl/vocab/device_checks.py)");
  m.def("_set_tensor_iterator_ops", &route::set_tensor_iterator_ops, py::arg("names"),
        "The structured TensorIterator operators (torch_fl/vocab/device_checks.py)");
  m.def("_host_dtype_gaps", &route::registered_dtype_gaps,
        "The operator/dtype pairs the host backing runs widened because the CPU lacks CUDA's kernel "
        "(\"op.overload: dtypes -> wide dtype\"); empty on a CUDA backing.");
  m.def("_set_default_native_label", &route::set_default_native_label, py::arg("label"));
  m.def("_run_native", &run_native_from_python,
        "Run aten::<name>.<overload> on the native route (backing device kernel on zero-copy aliases; the CPU "
        "fallback where the backing device has none), logged and counted as the native route.");
  m.def("_call_dtype", &call_dtype,
        "The dtype a call of aten::<name>.<overload> is routed by (what PyRoute decides: its first tensor "
        "argument's, or first tensor of a list's), or None.");
  m.def("_route_stats", &route::route_stats);
  m.def("_set_attention_routed", &ops::set_attention_routed, py::arg("routed"),
        "Tell scaled_dot_product_attention whether an attention operator has a route of its own (then calls "
        "without gradients decompose into the routed operators instead of taking the backing device's SDPA).");
  m.def("_attention_routed", &ops::is_attention_routed, "What _set_attention_routed was last told.");
  m.def("_reset_route_stats", &route::reset_route_stats);
  m.def("_alias_pool_stats", &tensor::alias_pool_stats, py::arg("python") = false,
        "(borrows, aliases made, aliases reshaped) of this thread's alias pool so far: a warm model's "
        "repeated forward should make and reshape none (benchmarks/alias_pool.py).");
  m.def(
      "_default_generator",
      [](int64_t i) { return runtime::default_generator(static_cast<c10::DeviceIndex>(i)); }, py::arg("index"),
      "flagos:index's default generator (torch.flagos.default_generators).");
  m.def("_core_ops", &ops::core_ops,
        "The operators the core implements itself at PrivateUse1 ('empty.memory_format', 'view', ...: "
        "metadata operations, scaled_dot_product_attention), which no route may take.");
  m.def("_drain_autograd_threads", &runtime::drain_autograd_device_threads, py::arg("timeout_s"),
        py::call_guard<py::gil_scoped_release>(),
        "Wait (without the GIL) until each autograd device thread has released the task it ran; the number "
        "still busy after timeout_s. Called at exit (runtime/autograd_threads.h).");
  m.def("_set_replay_recorder", &set_replay_recorder, py::arg("recorder"),
        "Record and replay's recorder (torch_fl.replay): "
        "recorder(fn, args, kwargs, returns) -> (result, recording).");
  m.def("_replay_input_tensors", &input_tensors_of, py::arg("op"), py::arg("args"), py::arg("kwargs"),
        "The tensors of a call of op ('add.Tensor') with these arguments, in the slot order of a recording "
        "(csrc/replay/README.md): what torch_fl.replay.input_tensors must agree with.");
  // The boundary of inductor's flagos wrappers (python/graph_boundary.h): plain fast calls, without the Python
  // argument parser and the dispatcher (a compiled graph allocates hundreds of buffers per call).
  static PyMethodDef fast_functions[] = {
      {"_graph_inputs", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&graph_inputs)), METH_FASTCALL,
       "_graph_inputs(args, native_ok[, aliases]): a graph's inputs (clearing args), as native aliases when it runs "
       "natively."},
      {"_graph_entry_aliases", &graph_entry_aliases, METH_NOARGS,
       "_graph_entry_aliases(): a graph's store of its parameters' entry aliases, for _graph_inputs."},
      {"_graph_empty_strided", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&graph_empty_strided)),
       METH_FASTCALL, "_graph_empty_strided(size, stride, dtype, index): a buffer of the graph running here."},
      {"_graph_outputs", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&graph_outputs)), METH_FASTCALL,
       "_graph_outputs(outputs, index, positions): the outputs at these positions as flagos tensors."},
      {nullptr, nullptr, 0, nullptr}};
  if (PyModule_AddFunctions(m.ptr(), fast_functions) != 0) {
    throw py::error_already_set();
  }
}

}  // namespace python
}  // namespace torch_fl

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  torch_fl::python::bind_module(m);
}
