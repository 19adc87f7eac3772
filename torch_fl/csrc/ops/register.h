// The registrations of ops/'s kernels, all in ops/register.cpp. _init()
// (python/module.cpp) calls them in its order: the metadata operations and
// the nested refusal before the native route (which skips operators that
// already have a PrivateUse1 kernel), autocast and SDPA after it.
#pragma once

namespace torch_fl {
namespace ops {

// The metadata operations at PrivateUse1 (ops/metadata_ops.h), each a core
// operator, and _copy_from's pass-through of the Conjugate and Negative keys.
void register_metadata_ops();
// The refusals of nested tensors of the strided layout (ops/nested.h) and of
// sparse and quantized tensors (ops/unsupported_layouts.h).
void register_unsupported_layouts();
// The AutocastPrivateUse1 kernels with CUDA's op lists and policies, and a
// fallthrough for the rest (ops/autocast.h).
void register_autocast();
// flagos's scaled_dot_product_attention at PrivateUse1 and
// AutogradPrivateUse1, and the fused-kernel choice (ops/sdpa.h).
void register_sdpa();

}  // namespace ops
}  // namespace torch_fl
