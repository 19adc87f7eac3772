// The operators the core implements itself at PrivateUse1 (metadata
// operations, SDPA): not routable to another backend. Each is registered
// through register_core_op(), which records its name for
// torch_fl._C._core_ops().
#pragma once

#include <torch/library.h>

#include <string>
#include <utility>
#include <vector>

namespace torch_fl {
namespace ops {

// Records `name` ("empty.memory_format", "view": torch_fl.routing.names's
// spelling) as a core operator; the caller registers it in `lib`.
void note_core_op(const char* name);

template <class Kernel>
void register_core_op(torch::Library& lib, const char* name, Kernel&& kernel) {
  note_core_op(name);
  lib.impl(name, std::forward<Kernel>(kernel));
}

// The names recorded so far, in registration order.
std::vector<std::string> core_ops();

}  // namespace ops
}  // namespace torch_fl
