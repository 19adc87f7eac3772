// The per-call path as one translation unit: the alias pool's thread state,
// RoutedArgs, the typed native kernels, the boxed native route and its
// counters (route/README.md).
//
// One unit because a routed call runs between long stretches of other code
// that evict it from the instruction cache: its code should be few functions
// close together, calling each other directly rather than across units, with
// the alias pool (tensor/alias_pool.h) inlined into the borrow and the
// release. benchmarks/route_instructions.py counts what a routed call adds.
// The autograd kernels (route/autograd_shortcut.cpp) are in unity_core.cpp:
// they call only the dispatcher, and in this unit their calls of the same
// Dispatcher::redispatch<> instances made GCC stop inlining it into the typed
// kernels (more instructions per routed call).
#include "tensor/alias_pool.cpp"

#include "route/counters.cpp"
#include "route/device_check.cpp"
#include "route/overlap_check.cpp"
#include "route/profiling.cpp"
#include "replay/signature.cpp"
#include "replay/program.cpp"
#include "replay/cache.cpp"
#include "route/routed_args.cpp"
#include "route/typed_native.cpp"
#include "route/native_route.cpp"
#include "route/dtype_gaps.cpp"
