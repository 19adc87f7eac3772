// Autocast on flagos: the same policies and op lists as PyTorch registers for
// AutocastCUDA.
#include "ops/autocast.h"

#include "runtime/library.h"

#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torch_fl {
namespace ops {

namespace {

at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                       int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
              "safe to autocast.");
}

void register_autocast_kernels(torch::Library& m) {
  using namespace at;  // the op-list macros name ATen types unqualified
  // The same policies and op lists as PyTorch registers for AutocastCUDA.
#define FLAGOS_LOW_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(FLAGOS_LOW_PRECISION_FP)
#define FLAGOS_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(FLAGOS_FP32)
#define FLAGOS_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(FLAGOS_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define FLAGOS_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(FLAGOS_PROMOTE)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_banned));
#undef FLAGOS_LOW_PRECISION_FP
#undef FLAGOS_FP32
#undef FLAGOS_FP32_SET_OPT_DTYPE
#undef FLAGOS_PROMOTE
}

}  // namespace

void register_autocast() {
  // Ops outside the lists pass through autocast untouched, as for CUDA.
  runtime::new_library("_", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__)
      .fallback(torch::CppFunction::makeFallthrough());
  register_autocast_kernels(runtime::new_library("aten", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__));
}

}  // namespace ops
}  // namespace torch_fl
