// The CUDA driver, reached at run time (dlopen of libcuda.so.1), for what
// c10's generic interfaces do not offer: launching a compiled kernel (the
// replays of replay/ launch Triton's kernels), asking whether a stream is
// being captured into a CUDA graph, and a stream's raw handle. No CUDA header
// is needed to build the core: the few driver types used are declared here as
// the driver's ABI has them (cuda.h: CUresult is an int, handles are
// pointers).
#pragma once

#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torch_fl {
namespace runtime {
namespace cuda_driver {

// One kernel launch, as Triton's launcher makes it with cuLaunchKernel's
// arguments (one CTA per cluster, no launch attributes).
struct Launch {
  void* function = nullptr;  // CUfunction
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block_x = 32;
  uint32_t shared_bytes = 0;
};

// Whether libcuda.so.1 could be loaded (loaded on the first call), and why not.
bool available();
std::string unavailable_reason();

// The current stream of CUDA device `index`, as the driver's handle.
void* current_stream(c10::DeviceIndex index);

// True while `stream` is being captured into a CUDA graph.
bool is_capturing(void* stream);

// Makes the primary context of CUDA device `index` current on this thread
// when no context is (a thread that has made no CUDA runtime call yet): the
// driver launches into the thread's current context.
void ensure_context(c10::DeviceIndex index);

// Launches `l` on `stream` with the kernel parameters `params` (pointers to
// each argument's bytes, cuLaunchKernel's kernelParams). Raises with the
// driver's message on failure, naming `what`.
void launch(const Launch& l, void* stream, void** params, const char* what);

// The (offset, size) of each parameter of `function`, from the driver
// (cuFuncGetParamInfo, CUDA 12.4 and later). False where the driver cannot
// say.
bool param_layout(void* function, std::vector<std::pair<size_t, size_t>>* out);

}  // namespace cuda_driver
}  // namespace runtime
}  // namespace torch_fl
