// A file of route/ offers its kernels as a list; route/register.cpp registers
// them (the registrations of the folder are all there).
#pragma once

#include <torch/library.h>

#include <string>
#include <vector>

namespace torch_fl {
namespace route {

// An operator ("add.Tensor", "_thnn_fused_gru_cell") and its kernel.
struct NamedKernel {
  std::string op;
  torch::CppFunction kernel;
};
using KernelList = std::vector<NamedKernel>;

}  // namespace route
}  // namespace torch_fl
