// flagos generators: one default generator per flagos device, whose device is
// flagos:i, over a generator of the backing device that draws the numbers.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>

namespace torch_fl {
namespace runtime {

// flagos:i's default generator (-1: the current device). On a CUDA backing it
// wraps cuda:i's default generator, so flagos:i's numbers are exactly
// cuda:i's; on host backing each virtual device has a CPU-algorithm generator
// of its own.
const at::Generator& default_generator(c10::DeviceIndex index);
// A new flagos generator on flagos:index (torch.Generator(device="flagos:i")).
at::Generator new_generator(c10::DeviceIndex index);

// The backing device's generator a flagos generator draws from: what a
// routed operator hands to the backing kernel. Raises for a generator of
// another device, as a CUDA operator does when given a CPU generator.
const at::Generator& backing_generator(const at::Generator& gen);

}  // namespace runtime
}  // namespace torch_fl
