// Recurrent networks on host backing: what CUDA runs for nn.LSTM, nn.GRU and
// packed sequences, where the CPU's kernels differ (route/host_rnn.cpp).
#pragma once

#include <torch/library.h>

namespace torch_fl {
namespace route {

// On host backing, registers in `library` (the native route's) CUDA's fused
// LSTM and GRU cells and their backward operators, composed from the CPU's
// own operators, and _pack_padded_sequence keeping batch_sizes on the CPU.
// Registers nothing on a CUDA backing, whose kernels are CUDA's.
void register_host_rnn(torch::Library& library);

}  // namespace route
}  // namespace torch_fl
