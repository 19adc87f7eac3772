// The torch::Library objects through which the core registers its kernels.
#pragma once

#include <c10/core/DispatchKey.h>
#include <torch/library.h>

#include <cstdint>

namespace torch_fl {
namespace runtime {

// Registrations live until the process ends, deliberately leaked: a
// torch::Library destroyed during static destruction would deregister from a
// dispatcher that may already be gone (an abort at interpreter exit). `file`
// is the registering file's __FILE__: torch._C._dispatch_dump() shows it.
inline torch::Library& new_library(const char* ns, c10::DispatchKey key, const char* file, uint32_t line) {
  return *new torch::Library(torch::Library::IMPL, ns, key, file, line);
}

}  // namespace runtime
}  // namespace torch_fl
