// Every kernel registration of route/ (route/register.h); the kernels and the
// lists of them are in the folder's other files.
//
// torch._C._dispatch_dump() names this file for every kernel of the native
// route: tests/unit/test_core_layout.py tells them from the core's own
// operators (ops/register.cpp) by it, and torch_fl/routing by
// torch_fl._C._core_ops(). Keep the native route's registrations here.
#include "route/register.h"

#include "route/collectives.h"
#include "route/dtype_gaps.h"
#include "route/foreach_scalars.h"
#include "route/host_rnn.h"
#include "route/native_route.h"
#include "route/typed_native.h"
#include "runtime/library.h"

#include <c10/util/Exception.h>
#include <torch/library.h>

#include <string>

namespace torch_fl {
namespace route {

namespace {

void impl_all(torch::Library& library, KernelList kernels) {
  for (NamedKernel& k : kernels) {
    library.impl(k.op.c_str(), std::move(k.kernel));
  }
}

// Drops the warning PyTorch gives for replacing a kernel of a key that already
// has one (route/collectives.cpp replaces PyTorch's PrivateUse1 kernels of the
// c10d:: operators on purpose); forwards any other. PyTorch gives that warning
// once per process, for the first replacement, whoever makes it.
class DropOverrideWarning final : public c10::WarningHandler {
 public:
  DropOverrideWarning() : previous_(c10::WarningUtils::get_warning_handler()) {}
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("Overriding a previously registered kernel") == std::string::npos) {
      previous_->process(warning);
    }
  }

 private:
  c10::WarningHandler* previous_;
};

}  // namespace

void register_native_route() {
  runtime::new_library("_", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__).fallback(native_route_fallback());

  // PyTorch registers, for every backend, kernels that implement the
  // functional and in-place forms of structured ops through their out= form
  // (CompositeExplicitAutogradNonFunctional). On flagos those would turn
  // add.Tensor into empty + add.out. Where the backing device has its own
  // kernel, route the op itself natively: one kernel call, and the dispatch
  // log names the operator the user called.
  auto& direct_library = runtime::new_library("aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  // On host backing, operator/dtype pairs CUDA has and the CPU lacks run
  // widened (route/dtype_gaps.cpp). First: a typed operator among them
  // (histc) keeps this kernel on host backing, as the kernels below skip
  // operators that already have a PrivateUse1 kernel.
  impl_all(direct_library, dtype_gap_kernels());
  // The hottest operators get typed kernels before the direct ones.
  impl_all(direct_library, typed_native_kernels());
  // On host backing, CUDA's fused LSTM/GRU cells and a packed sequence's CPU
  // batch_sizes (route/host_rnn.cpp), and native_dropout.
  impl_all(direct_library, host_rnn_kernels());
  // The _foreach addcmul/addcdiv scalars of a tensor, read on the host as on
  // CUDA (route/foreach_scalars.cpp).
  impl_all(direct_library, foreach_scalars_kernels());
  impl_all(direct_library, native_route_host_kernels());
  impl_all(direct_library, native_route_direct_kernels());

  // torch.distributed's collectives on flagos tensors run by the group's
  // backend for the backing device (route/collectives.cpp). PrivateUse1 is
  // flagos's key: its kernels replace the generic ones PyTorch registers for it.
  DropOverrideWarning drop;
  c10::WarningUtils::WarningHandlerGuard guard(&drop);
  impl_all(runtime::new_library("c10d", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__), collective_kernels());
}

}  // namespace route
}  // namespace torch_fl
