// torch.accelerator.Graph on flagos: PyTorch's generic graph interface
// (at::GraphImplInterface, torch >= 2.12) implemented for the flagos device.
#pragma once

namespace torch_fl {
namespace runtime {

// Registers flagos's graph implementation under the PrivateUse1 backend's
// name (after the rename), where the installed torch has the interface; a
// no-op on a torch without it (2.11).
void register_graph_impl();

}  // namespace runtime
}  // namespace torch_fl
