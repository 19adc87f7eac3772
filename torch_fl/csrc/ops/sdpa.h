// scaled_dot_product_attention on flagos: the backing device's fused kernels.
#pragma once

namespace torch_fl {
namespace ops {

// Registers flagos's scaled_dot_product_attention (PrivateUse1 and
// AutogradPrivateUse1) and the fused-kernel choice for flagos tensors.
void register_sdpa();
// Whether some attention operator has a route of its own: the no-gradient
// shortcut of scaled_dot_product_attention must not bypass it. Set by the
// routing layer whenever routes change.
void set_attention_routed(bool routed);
bool is_attention_routed();

}  // namespace ops
}  // namespace torch_fl
