// OnNative(fn): fn called on native aliases of its flagos arguments, its
// results returned as flagos tensors (zero copy).
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torch_fl {
namespace python {

// Registers the OnNative class on the module.
void bind_on_native(py::module& m);

}  // namespace python
}  // namespace torch_fl
