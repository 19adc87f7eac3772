// Record and replay in a PyRoute (python/replay_plan.h).
#include "python/replay_plan.h"

#include "python/python_args.h"
#include "route/counters.h"
#include "route/overlap_check.h"
#include "route/profiling.h"
#include "route/routed_args.h"
#include "runtime/device.h"

#include <ATen/ScalarOps.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <c10/core/DeviceGuard.h>

#include <iostream>

namespace torch_fl {
namespace python {

namespace {

// Recordings voided by autotuning, in a row, before a signature stays on the Python function.
constexpr int32_t kMaxAttempts = 3;

py::object& recorder() {
  static auto* r = new py::object();  // leaked: used until exit
  return *r;
}

std::vector<int64_t> ints(const py::handle& h) {
  return h.cast<std::vector<int64_t>>();
}

int32_t slot_in(const py::handle& h, int32_t slots, const char* what) {
  const auto k = h.cast<int64_t>();
  if (k < -1 || k >= slots) {
    throw py::value_error(std::string("recording: ") + what + " names slot " + std::to_string(k) + " of " +
                          std::to_string(slots));
  }
  return static_cast<int32_t>(k);
}

// A recorded constant as the IValue `param` takes. A Python number where the schema takes a tensor is what a
// TorchDispatchMode sees of a "wrapped number" (the 0-dim CPU tensor the dispatcher makes of `x + 1`, which type
// promotion treats as a Python scalar): replay hands the operator one again.
c10::IValue constant_of(const py::handle& value, const c10::Argument& param) {
  c10::TypePtr type = param.type();
  if (const auto optional = type->cast<c10::OptionalType>()) {
    type = optional->getElementType();
  }
  if (type->kind() == c10::TypeKind::TensorType && !value.is_none()) {
    std::optional<c10::Scalar> number;
    if (PyBool_Check(value.ptr())) {
      number = c10::Scalar(value.ptr() == Py_True);
    } else if (PyLong_Check(value.ptr())) {
      number = c10::Scalar(value.cast<int64_t>());
    } else if (PyFloat_Check(value.ptr())) {
      number = c10::Scalar(value.cast<double>());
    } else if (PyComplex_Check(value.ptr())) {
      number = c10::Scalar(value.cast<c10::complex<double>>());
    }
    if (number.has_value()) {
      return at::native::wrapped_scalar_tensor(*number);
    }
  }
  return torch::jit::toIValue(value, param.type());
}

replay::ArgTemplate arg_template(const py::handle& a, const c10::Argument& param, int32_t slots) {
  replay::ArgTemplate t;
  const auto kind = a[py::int_(0)].cast<std::string>();
  const py::handle value = a[py::int_(1)];
  if (kind == "c") {
    t.kind = replay::ArgTemplate::Kind::kConstant;
    t.constant = constant_of(value, param);
  } else if (kind == "t") {
    t.kind = replay::ArgTemplate::Kind::kSlot;
    t.slot = slot_in(value, slots, "a tensor argument");
    if (t.slot < 0) {
      throw py::value_error("recording: a tensor argument without a slot");
    }
  } else if (kind == "l" || kind == "o") {
    t.kind = kind == "l" ? replay::ArgTemplate::Kind::kTensorList : replay::ArgTemplate::Kind::kOptionalTensorList;
    for (const py::handle k : value) {
      t.slots.push_back(slot_in(k, slots, "a tensor list"));
    }
  } else {
    throw py::value_error("recording: unknown argument kind '" + kind + "'");
  }
  return t;
}

replay::LaunchStep launch_step(const py::tuple& s, int32_t slots) {
  // ("launch", function, (gx, gy, gz), block_x, shared, bytes, [(param, slot, offset)], name, [sizes])
  replay::LaunchStep l;
  l.launch.function = reinterpret_cast<void*>(s[1].cast<uint64_t>());
  const auto grid = ints(s[2]);
  if (grid.size() != 3 || grid[0] < 0 || grid[1] < 0 || grid[2] < 0) {
    throw py::value_error("recording: a launch grid must be three non-negative sizes");
  }
  for (size_t i = 0; i < 3; ++i) {
    l.launch.grid[i] = static_cast<uint32_t>(grid[i]);
  }
  l.launch.block_x = s[3].cast<uint32_t>();
  l.launch.shared_bytes = s[4].cast<uint32_t>();
  const std::string bytes = s[5].cast<std::string>();
  l.bytes.assign(bytes.begin(), bytes.end());
  l.name = s[7].cast<std::string>();
  const auto sizes = ints(s[8]);
  if (l.bytes.size() != 8 * sizes.size()) {
    throw py::value_error("recording: launch of " + l.name + " has " + std::to_string(l.bytes.size()) +
                          " argument bytes for " + std::to_string(sizes.size()) + " parameters");
  }
  for (const py::handle p : s[6]) {
    const auto param = p[py::int_(0)].cast<int64_t>();
    if (param < 0 || static_cast<size_t>(param) >= sizes.size() || sizes[param] != 8) {
      throw py::value_error("recording: launch of " + l.name + " has a pointer at parameter " +
                            std::to_string(param));
    }
    l.ptr_params.push_back(static_cast<uint32_t>(param));
    l.ptr_slots.push_back(slot_in(p[py::int_(1)], slots, "a kernel's pointer"));
    l.ptr_offsets.push_back(p[py::int_(2)].cast<int64_t>());
    if (l.ptr_slots.back() < 0) {
      throw py::value_error("recording: a kernel's pointer without a slot");
    }
  }
  // The driver knows the kernel's parameters: a recording that would hand it
  // other sizes than it takes is refused rather than launched.
  std::vector<std::pair<size_t, size_t>> layout;
  if (runtime::cuda_driver::param_layout(l.launch.function, &layout)) {
    bool same = layout.size() == sizes.size();
    for (size_t i = 0; same && i < layout.size(); ++i) {
      same = static_cast<int64_t>(layout[i].second) == sizes[i];
    }
    if (!same) {
      std::string driver;
      for (const auto& [offset, size] : layout) {
        driver += (driver.empty() ? "" : ",") + std::to_string(size);
      }
      std::string ours;
      for (int64_t size : sizes) {
        ours += (ours.empty() ? "" : ",") + std::to_string(size);
      }
      throw py::value_error("the parameters of kernel " + l.name + " differ from the launch recorded (driver: [" +
                            driver + "] bytes, recorded: [" + ours + "])");
    }
  }
  return l;
}

}  // namespace

int32_t ReplayPlan::reason_index(const std::string& reason) {
  for (size_t i = 0; i < reasons.size(); ++i) {
    if (reasons[i] == reason) {
      return static_cast<int32_t>(i);
    }
  }
  reasons.push_back(reason);
  reason_calls.push_back(0);
  return static_cast<int32_t>(reasons.size() - 1);
}

void set_replay_recorder(py::object r) {
  recorder() = std::move(r);
}

std::shared_ptr<const replay::Program> build_program(const c10::OperatorHandle& op, const py::handle& spec) {
  auto p = std::make_shared<replay::Program>();
  p->inputs = spec["inputs"].cast<int32_t>();
  p->slots = spec["slots"].cast<int32_t>();
  if (p->inputs < 0 || p->slots < p->inputs) {
    throw py::value_error("recording: bad slot counts");
  }
  p->views.resize(p->slots);
  for (const py::handle v : spec["views"]) {
    // (slot, root, dtype, sizes, strides, storage_offset)
    const int32_t slot = slot_in(v[py::int_(0)], p->slots, "a view");
    replay::ViewSlot view;
    view.root = slot_in(v[py::int_(1)], p->slots, "a view's root");
    const py::handle dtype = v[py::int_(2)];
    if (slot < p->inputs || view.root < 0 || !THPDtype_Check(dtype.ptr())) {
      throw py::value_error("recording: a view must be of a root slot, with a torch.dtype");
    }
    view.dtype = reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
    view.sizes = ints(v[py::int_(3)]);
    view.strides = ints(v[py::int_(4)]);
    view.storage_offset = v[py::int_(5)].cast<int64_t>();
    if (view.sizes.size() != view.strides.size()) {
      throw py::value_error("recording: a view's sizes and strides differ in length");
    }
    p->views[slot] = std::move(view);
  }
  for (int32_t k = 0; k < p->slots; ++k) {
    if (p->views[k].has_value() && p->views[p->views[k]->root].has_value()) {
      throw py::value_error("recording: a view's root is itself a view");
    }
  }
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const py::handle h : spec["steps"]) {
    const auto s = py::reinterpret_borrow<py::tuple>(h);
    const auto kind = s[0].cast<std::string>();
    if (kind == "launch") {
      p->steps.push_back({true, p->launches.size()});
      p->launches.push_back(launch_step(s, p->slots));
      continue;
    }
    if (kind != "op") {
      throw py::value_error("recording: unknown step '" + kind + "'");
    }
    // ("op", name, overload, args, outs)
    const auto name = s[1].cast<std::string>();
    const auto overload = s[2].cast<std::string>();
    auto handle = dispatcher.findSchema({name, overload});
    if (!handle.has_value()) {
      throw py::value_error("recording: no operator " + name + "." + overload);
    }
    replay::OpStep step(*handle);
    const auto& params = handle->schema().arguments();
    const auto args = py::reinterpret_borrow<py::list>(s[3]);
    if (args.size() != params.size()) {
      throw py::value_error("recording: " + name + " takes " + std::to_string(params.size()) + " arguments, " +
                            std::to_string(args.size()) + " recorded");
    }
    for (size_t i = 0; i < params.size(); ++i) {
      step.args.push_back(arg_template(args[i], params[i], p->slots));
    }
    for (const py::handle out : s[4]) {
      std::vector<int32_t> slots;
      for (const py::handle k : out) {
        slots.push_back(slot_in(k, p->slots, "an operator's result"));
      }
      step.outs.push_back(std::move(slots));
    }
    p->steps.push_back({false, p->ops.size()});
    p->ops.push_back(std::move(step));
  }
  for (const py::handle r : spec["results"]) {
    // ("t", [slot]) | ("n", []) | ("l", [slots])
    replay::ResultTemplate t;
    const auto kind = r[py::int_(0)].cast<std::string>();
    t.kind = kind == "t"   ? replay::ResultTemplate::Kind::kTensor
             : kind == "n" ? replay::ResultTemplate::Kind::kNone
                           : replay::ResultTemplate::Kind::kTensorList;
    for (const py::handle k : r[py::int_(1)]) {
      t.slots.push_back(slot_in(k, p->slots, "a result"));
      if (t.slots.back() < 0) {
        throw py::value_error("recording: a result without a slot");
      }
    }
    if ((kind == "t" && t.slots.size() != 1) || (kind != "t" && kind != "n" && kind != "l")) {
      throw py::value_error("recording: bad result '" + kind + "'");
    }
    p->results.push_back(std::move(t));
  }
  if (p->results.size() != op.schema().returns().size()) {
    throw py::value_error("recording: " + std::to_string(p->results.size()) + " results for an operator with " +
                          std::to_string(op.schema().returns().size()));
  }
  return p;
}

bool try_replay(ReplayPlan& f, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t first = stack->size() - nargs;
  if (!f.on(first_dtype(*stack, first)) || C10_UNLIKELY(has_empty_input(schema, *stack, first))) {
    return false;
  }
  replay::Signature sig;
  if (!replay::signature_of(*stack, nargs, &sig)) {
    return false;
  }
  const std::optional<replay::Entry> e = f.cache.find(sig);
  if (!e.has_value() || e->program == nullptr) {
    return false;
  }
  if (C10_UNLIKELY(route::g_route_flags.log_dispatch)) {
    std::cerr << f.line << std::flush;
  }
  if (int64_t* calls = f.calls.load(std::memory_order_relaxed)) {
    __atomic_fetch_add(calls, 1, __ATOMIC_RELAXED);
  }
  f.hits.fetch_add(1, std::memory_order_relaxed);
  route::RoutedArgs routed;
  routed.unwrap(stack, nargs);
  if (C10_UNLIKELY(routed.check_devices(op))) {
    routed.restore(stack, nargs);
    route::run_foreach_per_element(op, stack);
    return true;
  }
  if (C10_UNLIKELY(routed.shares_storage())) {
    route::check_written_overlaps(op, c10::ArrayRef<c10::IValue>(&*(stack->end() - nargs), nargs));
  }
  {
    c10::OptionalDeviceGuard guard;
    if (routed.index() >= 0 && routed.index() != runtime::current_device()) {
      guard.reset_device(c10::Device(kFlagos, routed.index()));
    }
    route::RouteScope scope(op, f.label.c_str());
    replay::run(*e->program, stack, nargs, routed.index() >= 0 ? routed.index() : runtime::current_device());
  }
  routed.finish(schema, stack);
  return true;
}

py::object call_replay_target(ReplayPlan& f, const c10::OperatorHandle& op, const py::object& fn,
                              const replay::Signature& sig, bool keyed, const py::tuple& args, const py::dict& kwargs) {
  if (!keyed) {
    // The reason's index is found once: this runs on every such call.
    if (f.unkeyed_reason < 0) {
      f.unkeyed_reason =
          f.reason_index("an argument cannot be keyed (a host tensor, a generator, a complex or symbolic number)");
    }
    f.reason_calls[f.unkeyed_reason] += 1;
    f.python.fetch_add(1, std::memory_order_relaxed);
    return fn(*args, **kwargs);
  }
  const std::optional<replay::Entry> known = f.cache.find(sig);
  if (known.has_value() && known->program != nullptr) {
    return fn(*args, **kwargs);  // stored by another thread since this call looked
  }
  if (known.has_value() && known->reason >= 0) {
    f.reason_calls[known->reason] += 1;
    f.python.fetch_add(1, std::memory_order_relaxed);
    return fn(*args, **kwargs);
  }
  TORCH_CHECK(recorder(), "flagos: replay has no recorder (torch_fl.replay)");
  py::tuple returns(op.schema().returns().size());
  for (size_t i = 0; i < op.schema().returns().size(); ++i) {
    returns[i] = py::str(op.schema().returns()[i].type()->str());
  }
  const py::tuple r = recorder()(fn, args, kwargs, returns);
  f.recorded.fetch_add(1, std::memory_order_relaxed);
  const py::object recording = r[1];
  replay::Entry e;
  if (recording.is_none()) {
    // Autotuning ran during the call: its launches were benchmarks. Record again.
    e.attempts = known.has_value() ? known->attempts + 1 : 1;
    if (e.attempts >= kMaxAttempts) {
      e.reason = f.reason_index("it autotuned on every recorded call");
    }
  } else if (py::isinstance<py::str>(recording)) {
    e.reason = f.reason_index(recording.cast<std::string>());
  } else {
    try {
      e.program = build_program(op, recording);
    } catch (const std::exception& ex) {
      e.reason = f.reason_index(std::string("its recording cannot be replayed: ") + ex.what());
    }
  }
  f.evicted.fetch_add(f.cache.store(sig, std::move(e)), std::memory_order_relaxed);
  return r[0];
}

std::vector<at::Tensor> input_tensors_of(const std::string& op, const py::tuple& args, const py::dict& kwargs) {
  const size_t dot = op.find('.');
  const std::string name = "aten::" + op.substr(0, dot);
  const std::string overload = dot == std::string::npos ? "" : op.substr(dot + 1);
  const auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!handle.has_value()) {
    throw py::value_error("no operator " + op);
  }
  const torch::jit::Stack stack = torch::jit::createStackForSchema(
      handle->schema(), torch::jit::tuple_slice(args), py::reinterpret_borrow<py::kwargs>(kwargs), std::nullopt);
  c10::SmallVector<at::Tensor, 8> in;
  replay::input_tensors(stack, stack.size(), &in);
  return std::vector<at::Tensor>(in.begin(), in.end());
}

py::dict replay_stats(ReplayPlan& f) {
  py::dict d;
  d["hits"] = f.hits.load();
  d["recorded"] = f.recorded.load();
  d["python"] = f.python.load();
  d["evicted"] = f.evicted.load();
  d["signatures"] = f.cache.size();
  d["programs"] = f.cache.programs();
  d["capacity"] = f.cache.capacity();
  py::dict reasons;
  for (size_t i = 0; i < f.reasons.size(); ++i) {
    reasons[py::str(f.reasons[i])] = f.reason_calls[i];
  }
  d["reasons"] = reasons;
  return d;
}

}  // namespace python
}  // namespace torch_fl
