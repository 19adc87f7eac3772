// The profiler scope of a routed call (route/profiling.h): the part that
// runs only while profiling.
#include "route/profiling.h"

#include "route/counters.h"

namespace torch_fl {
namespace route {

void RouteScope::open(at::StepCallbacks&& callbacks, const c10::OperatorHandle& op, const char* backend) {
  open_ = std::make_unique<Open>(std::move(callbacks));
  open_->name = "flagos::" + overload_name(op.operator_name()) + " -> " +
                (backend != nullptr ? std::string(backend) : native_label());
  open_->scope.before(std::string_view(open_->name));
}

}  // namespace route
}  // namespace torch_fl
