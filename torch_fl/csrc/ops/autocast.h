// Autocast on flagos with CUDA's op lists and policies (registered by
// ops/register.cpp, register_autocast).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace torch_fl {
namespace ops {

// binary_cross_entropy under autocast: refused, as on CUDA.
at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                       int64_t);

}  // namespace ops
}  // namespace torch_fl
