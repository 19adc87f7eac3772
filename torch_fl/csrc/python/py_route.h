// PyRoute: the PrivateUse1 kernel of an operator routed to a Python backend
// (FlagGems). It calls the backend's function on native aliases with the
// boxed call handled in C++: no torch.library Python kernel, no wrapper
// frames, no alias objects per call. The routing layer keeps the policy in
// Python: `on_error(exc, args, kwargs)`, `other_dtype(*args, **kwargs)` and
// `on_empty(*args, **kwargs)` receive the caller's flagos arguments.
#pragma once

#include "python/gil.h"
#include "python/python_args.h"
#include "route/counters.h"
#include "route/routed_args.h"
#include "runtime/device.h"
#include "tensor/alias_pool.h"

#include <torch/csrc/utils/pybind.h>

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>

#include <array>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

namespace torch_fl {
namespace python {

// What one route calls: the kernel, its policies, its counter and its log
// line. Swapped as a whole when the route changes.
struct PyRouteState {
  py::object fn;           // called with native arguments, as the aten operator
  py::object on_error;     // (exception, args, kwargs) -> result
  py::object other_dtype;  // called like the operator for the dtypes in `other`
  py::object on_empty;     // called like the operator when an input tensor is empty; null: no such check
  py::object cell;         // the routing layer's array('q', [calls, fallbacks, failures])
  // cell[0], counted here with the GIL held: through the array's buffer, held
  // while the state lives (which also keeps the array from being resized).
  int64_t* calls = nullptr;
  Py_buffer cell_view{};
  std::array<bool, static_cast<size_t>(c10::ScalarType::NumOptions)> other{};
  bool any_other = false;  // some dtype is in `other`
  std::string line;  // the dispatch-log line, printed while g_route_flags.log_dispatch is on

  // The last reference may be dropped by a kernel call without the GIL, or
  // by the dispatcher's own destruction after Python has shut down (the
  // registration is never deleted at exit): then the objects are gone with
  // the interpreter and taking the GIL would abort the process.
  ~PyRouteState() {
    if (!python_alive()) {
      for (py::object* o : {&fn, &on_error, &other_dtype, &on_empty, &cell}) {
        o->release();
      }
      return;
    }
    py::gil_scoped_acquire gil;
    if (calls != nullptr) {
      PyBuffer_Release(&cell_view);
    }
    fn = on_error = other_dtype = on_empty = cell = py::object();
  }
};

// One call of a route, counted in its cell with the GIL held (a store through
// the array's buffer: no Python int per call).
inline void count_call(PyRouteState& st) {
  ++*st.calls;
}

class PyRouteKernel final : public c10::OperatorKernel {
 public:
  // The state is read and swapped only with the GIL held (update() is
  // called from Python), so a plain shared_ptr copy needs no atomics.
  using Slot = std::shared_ptr<std::shared_ptr<PyRouteState>>;
  explicit PyRouteKernel(Slot slot) : slot_(std::move(slot)) {}

  // For a typed front (GIL held): the state a call starts with, and the
  // operator's keyword-only argument names.
  std::shared_ptr<PyRouteState> state() const {
    return *slot_;
  }
  PyObject* kwnames(const c10::FunctionSchema& schema) {
    return kwarg_names(schema, kwarg_names_);
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const auto& schema = op.schema();
    const size_t nargs = schema.arguments().size();
    // Everything below holds the GIL, to the end: dropping the last C++
    // reference to a tensor that Python also held (the caller's arguments,
    // their aliases once passed to Python) decrefs its PyObject, which
    // would take the GIL again for each of them. Through a typed front
    // (PyFront) the GIL is held already and this is a re-entrant acquire.
    GilHeld gil;
    route::RoutedArgs routed(tensor::python_alias_pool());
    {
      // A route change may swap the state during this call (a fallback
      // re-plans its own operator): the call keeps the state it started with.
      std::shared_ptr<PyRouteState> st = *slot_;
      if (C10_UNLIKELY(route::g_route_flags.log_dispatch)) {  // one switch for every route (set_flags)
        std::cerr << st->line << std::flush;
      }
      const c10::ScalarType dtype = first_dtype(*stack, stack->size() - nargs);
      if (C10_UNLIKELY(dtype != c10::ScalarType::Undefined && st->other[static_cast<size_t>(dtype)])) {
        push_python_result(schema, pop_python_args(schema, stack, kwarg_names_).call(st->other_dtype), stack);
        return;
      }
      if (st->on_empty && C10_UNLIKELY(has_empty_input(schema, *stack, stack->size() - nargs))) {
        push_python_result(schema, pop_python_args(schema, stack, kwarg_names_).call(st->on_empty), stack);
        return;
      }
      // The caller's arguments, for the error path.
      c10::SmallVector<c10::IValue, 8> original(stack->end() - nargs, stack->end());
      routed.unwrap(stack, nargs);
      count_call(*st);
      const PyArgs py_args = pop_python_args(schema, stack, kwarg_names_);
      py::object result;
      try {
        // Launch on the arguments' device (a flagos stream is a CUDA stream).
        c10::OptionalDeviceGuard guard;
        if (routed.index() >= 0 && routed.index() != runtime::current_device()) {
          guard.reset_device(c10::Device(kFlagos, routed.index()));
        }
        result = py_args.call(st->fn);
      } catch (py::error_already_set& e) {
        stack->insert(stack->end(), original.begin(), original.end());
        const PyArgs caller = pop_python_args(schema, stack, kwarg_names_);
        push_python_result(schema, st->on_error(e.value(), caller.args_tuple(), caller.kwargs_dict()), stack);
        return;  // the policy returned flagos results, or raised
      }
      push_python_result(schema, result, stack);
    }
    routed.finish(schema, stack);
  }

 private:
  Slot slot_;
  std::optional<PyObject*> kwarg_names_;  // filled on the first call, with the GIL
};

// Registers the PyRoute class on the module.
void bind_py_route(py::module& m);

}  // namespace python
}  // namespace torch_fl
