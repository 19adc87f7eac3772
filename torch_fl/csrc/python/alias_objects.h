// The Python side of the alias pool: the hooks through which tensor/ reads a
// Python object's reference count and parks a pooled alias's object
// (tensor/python_object_hooks.h).
#pragma once

namespace torch_fl {
namespace python {

// Installs them (module init, before any route runs).
void install_python_object_hooks();

}  // namespace python
}  // namespace torch_fl
