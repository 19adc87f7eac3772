// Autocast on flagos: the same policies and op lists as PyTorch registers for
// AutocastCUDA (registered by ops/register.cpp, through ATen's own kernels);
// the one kernel of flagos's own is here.
#include "ops/autocast.h"

#include <c10/util/Exception.h>

namespace torch_fl {
namespace ops {

at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                       int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
              "safe to autocast.");
}

}  // namespace ops
}  // namespace torch_fl
