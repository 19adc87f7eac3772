// A routed call's backend in the profiler's trace: while a profiler (or any
// RecordFunction callback) is active, a routed call opens a scope named
// "flagos::<overload> -> <backend>" (flagos::add.Tensor -> cpu), nested in the
// dispatcher's own aten:: scope, so a trace shows which backend ran each call.
//
// Per call without a profiler: RecordFunction's own check for active
// callbacks (the one the dispatcher makes per operator), one pointer store,
// and one null test at the end. The name is built only while profiling.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>

#include <memory>
#include <string>

namespace torch_fl {
namespace route {

// The label the native route goes by in the dispatch log and the trace
// ("cpu" or "cuda": the backing device, set once at init).
std::string native_label();

class RouteScope {
 public:
  // `backend`: the backend's name (a string that outlives the call), or
  // nullptr for the native route's label of `op`.
  RouteScope(const c10::OperatorHandle& op, const char* backend = nullptr) {
    auto callbacks = at::getStepCallbacksUnlessEmpty(at::RecordScope::FUNCTION);
    if (C10_UNLIKELY(callbacks.has_value())) {
      open(std::move(*callbacks), op, backend);
    }
  }
  RouteScope(const RouteScope&) = delete;
  RouteScope& operator=(const RouteScope&) = delete;

 private:
  struct Open {
    explicit Open(at::StepCallbacks&& callbacks) : scope(std::move(callbacks)) {}
    std::string name;  // declared first: outlives the scope that records it
    at::RecordFunction scope;
  };
  C10_NOINLINE void open(at::StepCallbacks&& callbacks, const c10::OperatorHandle& op, const char* backend);

  std::unique_ptr<Open> open_;  // set only while profiling; its destructor ends the scope
};

}  // namespace route
}  // namespace torch_fl
