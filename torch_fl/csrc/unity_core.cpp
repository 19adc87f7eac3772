// The rest of the core below the Python layer as one translation unit: the
// device (runtime/), the aliases (tensor/alias.cpp), flagos's autograd
// kernels (route/autograd_shortcut.cpp) and the core's own operators (ops/).
// Few units are the quicker build: ATen's headers are parsed once per unit
// instead of once per file. unity_route.cpp holds the per-call path.
#include "runtime/allocator.cpp"
#include "runtime/autograd_threads.cpp"
#include "runtime/backing.cpp"
#include "runtime/cuda_driver.cpp"
#include "runtime/device_guard.cpp"
#include "runtime/generator.cpp"
#include "runtime/graph_impl.cpp"
#include "runtime/hooks.cpp"
#include "runtime/profiler_stubs.cpp"

#include "tensor/alias.cpp"

#include "route/autograd_shortcut.cpp"

#include "ops/core_ops.cpp"
#include "ops/metadata_ops.cpp"
#include "ops/nested.cpp"
#include "ops/autocast.cpp"
#include "ops/sdpa.cpp"
#include "route/host_rnn.cpp"
