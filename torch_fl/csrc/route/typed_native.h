// Typed native kernels for the operators models call most (route/typed_ops.h).
#pragma once

#include <torch/library.h>

namespace torch_fl {
namespace route {

// Registers them in `lib` (aten, PrivateUse1) before the boxed route, which
// then leaves those operators alone.
void register_typed_native_route(torch::Library& lib);

}  // namespace route
}  // namespace torch_fl
