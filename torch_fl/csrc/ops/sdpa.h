// scaled_dot_product_attention on flagos: the backing device's fused kernels.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace torch_fl {
namespace ops {

// Sets the fused-kernel choice for flagos tensors and finds the operator;
// before the kernels are registered (ops/register.cpp, register_sdpa).
void init_sdpa();
// flagos's scaled_dot_product_attention: the shortcut when there is no
// gradient to record, else the decomposition (on host backing PyTorch's
// composite, on a CUDA backing the backing device's fused kernels).
at::Tensor sdpa_host(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                     std::optional<double> scale, bool enable_gqa);
at::Tensor sdpa_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                     std::optional<double> scale, bool enable_gqa);
// Whether some attention operator has a route of its own: the no-gradient
// shortcut of scaled_dot_product_attention must not bypass it. Set by the
// routing layer whenever routes change.
void set_attention_routed(bool routed);
bool is_attention_routed();

}  // namespace ops
}  // namespace torch_fl
