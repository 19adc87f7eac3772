// Typed fronts of Python routes: a PyRoute for an operator of
// route/typed_ops.h registers a kernel with the operator's own C++ signature,
// which hands the Python kernel its arguments without boxing them.
#pragma once

#include "python/py_route.h"

#include <torch/library.h>

#include <string>

namespace torch_fl {
namespace python {

// Registers the typed front of `op` on `lib`, calling the route in `slot`.
using FrontInstaller = void (*)(torch::Library& lib, const char* op, Slot slot);

// The typed front of an operator ("add.Tensor"), or nullptr where it has none.
FrontInstaller py_front(const std::string& op);

}  // namespace python
}  // namespace torch_fl
