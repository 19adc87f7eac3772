// flagos's autograd kernels for the typed operators (route/typed_ops.h).
#pragma once

namespace torch_fl {
namespace autograd {

// Registers them at AutogradPrivateUse1: calls that record nothing skip
// VariableType (autograd/autograd_shortcut.cpp says why and when).
void register_autograd_shortcut();

}  // namespace autograd
}  // namespace torch_fl
