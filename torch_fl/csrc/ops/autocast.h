// Autocast on flagos with CUDA's op lists and policies.
#pragma once

namespace torch_fl {
namespace ops {

// Registers the AutocastPrivateUse1 kernels (and a fallthrough for the rest).
void register_autocast();

}  // namespace ops
}  // namespace torch_fl
