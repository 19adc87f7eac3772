// Recurrent networks on host backing: what CUDA runs for nn.LSTM, nn.GRU and
// packed sequences, where the CPU's kernels differ (route/host_rnn.cpp).
#pragma once

#include "route/kernel_list.h"

namespace torch_fl {
namespace route {

// On host backing, CUDA's fused LSTM and GRU cells and their backward
// operators, composed from the CPU's own operators, and _pack_padded_sequence
// keeping batch_sizes on the CPU: kernels for the native route's library
// (route/register.cpp). None on a CUDA backing, whose kernels are CUDA's.
KernelList host_rnn_kernels();

}  // namespace route
}  // namespace torch_fl
