// PyRoute: the PrivateUse1 kernel of an operator routed away from the native
// route (to FlagGems, the CPU fallback, per-dtype mixes of those and native).
//
// The routing layer (torch_fl/routing/kernels.py) plans, per dtype, which
// target runs; this kernel classifies each call and runs that target. The
// rules that classify a call are written here and only here: its dtype is
// its first tensor argument's (or first tensor of a list), and an input is
// empty when a tensor it reads (not an out= it writes) has no elements. What
// to do about a fallback, an empty input or a kernel that raised stays a
// Python decision: the routing layer's callables get the dtype decided here.
//
// A PyRoute is registered once per operator and never removed: removing a
// kernel another thread is running frees it under that thread. An operator
// routed back to native keeps its PyRoute in the native state, which runs the
// native route without touching Python (`RouteSlot::native`).
#pragma once

#include "python/replay_plan.h"
#include "python/gil.h"
#include "python/python_args.h"
#include "route/counters.h"
#include "route/native_route.h"
#include "route/overlap_check.h"
#include "route/profiling.h"
#include "route/routed_args.h"
#include "runtime/device.h"
#include "tensor/alias_pool.h"

#include <torch/csrc/utils/pybind.h>

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch_fl {
namespace python {

// What runs a call, by the routing layer's CoreTarget.kind.
enum class TargetKind : uint8_t {
  kNative,       // the native route (it logs and counts itself)
  kCpuFallback,  // PyTorch's CPU fallback: copy to the host, CPU kernel, copy back
  kFallback,     // `notice(dtype)` (counts, warns or raises), then the native route
  kKernel,       // a backend function on native aliases (FlagGems)
};

struct Target {
  TargetKind kind = TargetKind::kNative;
  py::object fn;        // kKernel: called with native arguments, as the aten operator
  py::object on_error;  // kKernel: (exception, dtype, args, kwargs) -> result, or raises
  py::object notice;    // kFallback: notice(dtype); kKernel: the same for a call with an empty input (null: no check)
  py::object counters;  // kKernel: array('q', [calls, fallbacks, failures]); calls counted through its buffer
  int64_t* calls = nullptr;
  Py_buffer counters_view{};
  bool replay = false;  // kKernel: fn is recorded once per signature and replayed (python/replay_plan.h)
  std::string label;  // the backend's name in the dispatch log and the profiler's trace
  std::string line;   // kKernel, kCpuFallback: the dispatch-log line, naming what runs

  Target() = default;
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;
  // The last reference may be dropped without the GIL, or after Python has
  // shut down (the registration is never deleted): then the objects are gone
  // with the interpreter and taking the GIL would abort the process.
  ~Target() {
    if (!python_alive()) {
      for (py::object* o : {&fn, &on_error, &notice, &counters}) {
        o->release();
      }
      return;
    }
    py::gil_scoped_acquire gil;
    if (calls != nullptr) {
      PyBuffer_Release(&counters_view);
    }
    fn = on_error = notice = counters = py::object();
  }
};

// A size rule's class: calls whose first tensor has at least `min_numel`
// elements run targets[target].
struct SizeClass {
  int64_t min_numel;
  uint8_t target;
};

// An argument rule's class (`pow.Tensor_Scalar[exponent=2]`): calls whose
// tested argument equals `value` run targets[target], or the size classes
// sizes[sizes - 1] when they have some (0: none). Numbers compare by value
// (2 matches 2 and 2.0, a bool is 0 or 1), as the routing layer's
// conditions.values_equal; anything else (None, a complex number) matches none.
struct ValueClass {
  double value;
  int64_t ivalue;  // `value` when integral
  bool integral;
  uint8_t target;
  uint8_t sizes;

  bool matches(const c10::IValue& v) const {
    if (v.isInt()) {
      return integral ? v.toInt() == ivalue : static_cast<double>(v.toInt()) == value;
    }
    if (v.isDouble()) {
      return v.toDouble() == value;
    }
    if (v.isBool()) {
      return integral && static_cast<int64_t>(v.toBool()) == ivalue;
    }
    return false;
  }
};

// One plan: the targets and which runs each dtype. Swapped as a whole when
// the route changes; read and swapped only with the GIL held.
struct PyRouteState {
  std::vector<std::unique_ptr<Target>> targets;  // [0]: the default
  std::array<uint8_t, static_cast<size_t>(c10::ScalarType::NumOptions)> of_dtype{};  // index into targets
  bool any_dtype = false;  // some dtype has a target or size classes of its own
  // Size rules (`mm[bfloat16, numel>=N]`): per dtype, 1 + an index into
  // `sizes` (0: none); each list sorted by min_numel, largest first. A call
  // below every threshold runs its dtype's target.
  std::array<uint8_t, static_cast<size_t>(c10::ScalarType::NumOptions)> sizes_of{};
  std::vector<std::vector<SizeClass>> sizes;
  bool any_size = false;  // some dtype has size rules (any_dtype is set too): only then is a call's size read
  // Argument rules: the tested argument's index among the schema's arguments, and per dtype (the last entry:
  // calls without a tensor argument) 1 + an index into `values` (0: none). A call whose argument matches no
  // class runs its dtype's target and size classes.
  int64_t arg_index = -1;
  std::array<uint8_t, static_cast<size_t>(c10::ScalarType::NumOptions) + 1> values_of{};
  std::vector<std::vector<ValueClass>> values;
  bool any_value = false;  // some dtype has value classes (any_dtype is set too): only then is the argument read

  // The target of a call of `dtype` below every size threshold, whose argument matches no value class.
  const Target& target(c10::ScalarType dtype) const {
    if (C10_LIKELY(!any_dtype) || dtype == c10::ScalarType::Undefined) {
      return *targets[0];
    }
    return *targets[of_dtype[static_cast<size_t>(dtype)]];
  }

  // The target of a call of `dtype`; numel() gives its first tensor's element count, asked only when the
  // dtype has size classes (a plan without dtype or size rules costs what target(dtype) costs). For a plan
  // with value classes (any_value) the call's argument decides too: the overload below takes it.
  template <class Numel>
  const Target& target(c10::ScalarType dtype, Numel numel) const {
    if (C10_LIKELY(!any_dtype) || dtype == c10::ScalarType::Undefined) {
      return *targets[0];
    }
    const auto d = static_cast<size_t>(dtype);
    return C10_UNLIKELY(any_size) ? sized(sizes_of[d], of_dtype[d], numel) : *targets[of_dtype[d]];
  }

  // The target of a call of `dtype` whose tested argument arg() returns (asked only when the dtype has value
  // classes).
  template <class Numel, class Arg>
  const Target& target(c10::ScalarType dtype, Numel numel, Arg arg) const {
    if (C10_UNLIKELY(any_value)) {
      if (const uint8_t v = values_of[value_slot(dtype)]) {
        const c10::IValue& a = arg();
        for (const ValueClass& c : values[v - 1]) {
          if (c.matches(a)) {
            return sized(c.sizes, c.target, numel);
          }
        }
      }
    }
    return target(dtype, numel);
  }

  // Whether `dtype` runs `pred` for some call (any size or value class).
  template <class Pred>
  const Target* any_target(c10::ScalarType dtype, Pred pred) const {
    const Target& base = target(dtype);
    if (pred(base)) {
      return &base;
    }
    std::vector<uint8_t> lists;  // size class lists to look through (0: none)
    if (any_size && dtype != c10::ScalarType::Undefined) {
      lists.push_back(sizes_of[static_cast<size_t>(dtype)]);
    }
    if (const uint8_t v = any_value ? values_of[value_slot(dtype)] : 0) {
      for (const ValueClass& c : values[v - 1]) {
        if (pred(*targets[c.target])) {
          return targets[c.target].get();
        }
        lists.push_back(c.sizes);
      }
    }
    for (const uint8_t s : lists) {
      if (s == 0) {
        continue;
      }
      for (const SizeClass& c : sizes[s - 1]) {
        if (pred(*targets[c.target])) {
          return targets[c.target].get();
        }
      }
    }
    return nullptr;
  }

  static size_t value_slot(c10::ScalarType dtype) {
    return dtype == c10::ScalarType::Undefined ? static_cast<size_t>(c10::ScalarType::NumOptions)
                                               : static_cast<size_t>(dtype);
  }

 private:
  // The size classes sizes[s - 1] (s = 0: none) of a call, targets[base] below every threshold.
  template <class Numel>
  const Target& sized(uint8_t s, uint8_t base, Numel numel) const {
    if (s != 0) {
      const int64_t n = numel();
      for (const SizeClass& c : sizes[s - 1]) {
        if (n >= c.min_numel) {
          return *targets[c.target];
        }
      }
    }
    return *targets[base];
  }
};

// A PyRoute's kernel state, shared by its boxed kernel and its typed front.
struct RouteSlot {
  std::shared_ptr<PyRouteState> state;  // GIL held to read or swap
  // Every dtype runs the native route: read without the GIL, so an operator
  // routed back to native costs a relaxed load over the native route.
  std::atomic<bool> native{false};
  // Record and replay's state and recordings: kept across route changes (the
  // recordings depend only on the backend's function).
  ReplayPlan replay;
};
using Slot = std::shared_ptr<RouteSlot>;

// The routing layer's notice for a call that runs natively instead (a
// fallback, an empty input): it counts, warns once, or raises under
// FLAGOS_STRICT=1. GIL held.
void call_notice(const py::object& notice, c10::ScalarType dtype);

class PyRouteKernel final : public c10::OperatorKernel {
 public:
  explicit PyRouteKernel(Slot slot) : slot_(std::move(slot)) {}

  // For a typed front (GIL held): the route's state, and the operator's
  // keyword-only argument names.
  const Slot& slot() const {
    return slot_;
  }
  PyObject* kwnames(const c10::FunctionSchema& schema) {
    return kwarg_names(schema, kwarg_names_);
  }

  // The routing layer's error policy for a kernel that raised. GIL held.
  static py::object call_on_error(const Target& t, py::error_already_set& e, c10::ScalarType dtype,
                                  const py::tuple& args, const py::dict& kwargs);

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    if (C10_UNLIKELY(writes_.load(std::memory_order_relaxed) != Writes::kNo) && writes(op)) {
      const route::WrittenArguments written(op.schema(), *stack);
      run(op, ks, stack);
      written.bump();
      return;
    }
    run(op, ks, stack);
  }

 private:
  void run(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    if (slot_->native.load(std::memory_order_relaxed)) {
      route::run_native_route(op, ks, stack);
      return;
    }
    // A signature recorded before replays here, without the GIL.
    if (slot_->replay.any.load(std::memory_order_relaxed) && try_replay(slot_->replay, op, stack)) {
      return;
    }
    const Then then = run_python_side(op, stack);
    // Native work runs without the GIL, as it does off the native route.
    if (then == Then::kNative) {
      route::run_native_route(op, ks, stack);
    } else if (then == Then::kCpuFallback) {
      route::call_cpu_fallback(op, stack);
    }
  }

  // Operators that write arguments and return nothing bump the flagos tensors they write on every route
  // (route/native_route.h). Found on the first call: the kernel is made before it knows its operator.
  enum class Writes : uint8_t { kUnknown, kNo, kYes };
  C10_NOINLINE bool writes(const c10::OperatorHandle& op) {
    Writes w = writes_.load(std::memory_order_relaxed);
    if (w == Writes::kUnknown) {
      w = route::writes_without_returning(op.schema()) ? Writes::kYes : Writes::kNo;
      writes_.store(w, std::memory_order_relaxed);
    }
    return w == Writes::kYes;
  }

  // What is left to run once the Python side has looked at a call.
  enum class Then : uint8_t { kDone, kNative, kCpuFallback };

  // Classifies the call (its dtype, an empty input) under the GIL, and runs
  // what needs Python: a notice, a backend kernel.
  Then run_python_side(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    // The GIL is held to the end: dropping the last C++ reference to a
    // tensor that Python also held (the caller's arguments, their aliases
    // once passed to Python) decrefs its PyObject, which would take the GIL
    // again for each of them.
    GilHeld gil;
    // A route change may swap the state during this call (a fallback
    // re-plans its own operator): the call keeps the state it started with.
    std::shared_ptr<PyRouteState> st = slot_->state;
    if (C10_UNLIKELY(st == nullptr)) {  // set native since the caller looked
      return Then::kNative;
    }
    const auto& schema = op.schema();
    const size_t first = stack->size() - schema.arguments().size();
    const c10::ScalarType dtype = first_dtype(*stack, first);
    const Target& t = st->target(
        dtype, [&] { return first_numel(*stack, first); },
        [&]() -> const c10::IValue& { return (*stack)[first + st->arg_index]; });
    switch (t.kind) {
      case TargetKind::kNative:
        return Then::kNative;
      case TargetKind::kFallback:
        call_notice(t.notice, dtype);
        return Then::kNative;
      case TargetKind::kCpuFallback:
        if (C10_UNLIKELY(route::g_route_flags.log_dispatch)) {
          std::cerr << t.line << std::flush;
        }
        return Then::kCpuFallback;
      case TargetKind::kKernel:
        if (t.notice && C10_UNLIKELY(has_empty_input(schema, *stack, first))) {
          call_notice(t.notice, dtype);
          return Then::kNative;
        }
        run_kernel(op, t, dtype, stack);
        return Then::kDone;
    }
    return Then::kNative;
  }

  // The backend function on native aliases; its error to the routing layer's
  // policy, with the caller's own arguments. GIL held.
  void run_kernel(const c10::OperatorHandle& op, const Target& t, c10::ScalarType dtype, torch::jit::Stack* stack) {
    const auto& schema = op.schema();
    const size_t nargs = schema.arguments().size();
    if (C10_UNLIKELY(route::g_route_flags.log_dispatch)) {
      std::cerr << t.line << std::flush;
    }
    ++*t.calls;  // a store through the array's buffer: no Python int per call
    // A replayed target keys the call on its flagos arguments, before they are unwrapped.
    replay::Signature sig;
    const bool keyed = t.replay && replay::signature_of(*stack, nargs, &sig);
    route::RoutedArgs routed(tensor::python_alias_pool());
    {
      // The caller's arguments, for the error path.
      c10::SmallVector<c10::IValue, 8> original(stack->end() - nargs, stack->end());
      routed.unwrap(stack, nargs);
      if (C10_UNLIKELY(routed.check_devices(op))) {
        routed.restore(stack, nargs);
        route::run_foreach_per_element(op, stack);
        return;
      }
      if (C10_UNLIKELY(routed.shares_storage())) {
        route::check_written_overlaps(op, c10::ArrayRef<c10::IValue>(&*(stack->end() - nargs), nargs));
      }
      const PyArgs py_args = pop_python_args(schema, stack, kwarg_names_);
      py::object result;
      try {
        // Launch on the arguments' device (a flagos stream is a CUDA stream).
        c10::OptionalDeviceGuard guard;
        if (routed.index() >= 0 && routed.index() != runtime::current_device()) {
          guard.reset_device(c10::Device(kFlagos, routed.index()));
        }
        route::RouteScope scope(op, t.label.c_str());
        result = t.replay ? call_replay_target(slot_->replay, op, t.fn, sig, keyed, py_args.args_tuple(),
                                           py_args.kwargs_dict())
                        : py_args.call(t.fn);
      } catch (py::error_already_set& e) {
        stack->insert(stack->end(), original.begin(), original.end());
        const PyArgs caller = pop_python_args(schema, stack, kwarg_names_);
        push_python_result(schema, call_on_error(t, e, dtype, caller.args_tuple(), caller.kwargs_dict()), stack);
        return;  // the policy returned flagos results, or raised
      }
      push_python_result(schema, result, stack);
    }
    routed.finish(schema, stack);
  }

  Slot slot_;
  std::atomic<Writes> writes_{Writes::kUnknown};  // relaxed: every thread computes the same answer
  std::optional<PyObject*> kwarg_names_;  // filled on the first call, with the GIL
};

// Registers the PyRoute class on the module.
void bind_py_route(py::module& m);

}  // namespace python
}  // namespace torch_fl
