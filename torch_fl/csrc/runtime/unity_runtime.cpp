// The build unit of runtime/: every file of the folder (csrc/README.md, Build
// units). One unit per folder parses ATen's headers once per folder.
#include "runtime/allocator.cpp"
#include "runtime/autograd_threads.cpp"
#include "runtime/backing.cpp"
#include "runtime/cuda_driver.cpp"
#include "runtime/device_guard.cpp"
#include "runtime/generator.cpp"
#include "runtime/graph_impl.cpp"
#include "runtime/hooks.cpp"
#include "runtime/profiler_stubs.cpp"
