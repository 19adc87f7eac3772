// The build unit of route/, the per-call path: RoutedArgs, the typed native
// kernels, the boxed native route and its counters, the device and overlap
// checks (route/README.md), and the host-backing compositions registered with
// the native route (dtype_gaps.cpp, host_rnn.cpp, foreach_scalars.cpp).
//
// One unit because a routed call runs between long stretches of other code
// that evict it from the instruction cache: its code should be few functions
// close together, calling each other directly rather than across units, with
// the alias pool (tensor/alias_pool.h, header-only) inlined into the borrow
// and the release. benchmarks/route_instructions.py counts what a routed call
// adds. The autograd kernels are a unit of their own (autograd/unity_autograd.cpp
// says why).
//
// Measured when the units became folders (callgrind, 4x4 CPU tensors on host
// backing, torch_fl's own functions per call): a routed add executes 1,195
// instructions of torch_fl's as with the old units (unity_route.cpp with the
// alias pool and replay, unity_core.cpp with the rest), a routed mul 1,181
// instead of 1,209: Dispatcher::redispatch<Tensor, const Tensor&, const
// Tensor&> is now inlined into its typed kernel (34 instructions it cost out
// of line). The thread's pool lookup must stay inline (tensor/alias_pool.h):
// out of line it cost a call per borrow.
#include "route/counters.cpp"
#include "route/cpu_fallback.cpp"
#include "route/device_check.cpp"
#include "route/overlap_check.cpp"
#include "route/profiling.cpp"
#include "route/routed_args.cpp"
#include "route/typed_native.cpp"
#include "route/native_route.cpp"
#include "route/dtype_gaps.cpp"
#include "route/foreach_scalars.cpp"
#include "route/host_rnn.cpp"
#include "route/collectives.cpp"
#include "route/register.cpp"
