// The core below the Python layer as one translation unit: every file of
// runtime/, tensor/, route/ and ops/, in dependency order.
//
// One unit because the per-call path (route/routed_args.cpp with the alias
// pool of tensor/alias_pool.h, the typed and boxed native kernels, the
// autograd shortcut) runs between long stretches of other code that evict it
// from the instruction cache: its code should be few functions close
// together, calling each other directly rather than across units
// (benchmarks/route_instructions.py counts what a routed call adds). One unit
// is also the quicker build: ATen's headers are parsed once instead of once
// per file. Each file included here also compiles on its own.
#include "runtime/allocator.cpp"
#include "runtime/backing.cpp"
#include "runtime/device_guard.cpp"
#include "runtime/hooks.cpp"

#include "tensor/alias.cpp"
#include "tensor/alias_pool.cpp"

#include "route/counters.cpp"
#include "route/routed_args.cpp"
#include "route/typed_native.cpp"
#include "route/native_route.cpp"
#include "route/autograd_shortcut.cpp"

#include "ops/core_ops.cpp"
#include "ops/metadata_ops.cpp"
#include "ops/autocast.cpp"
#include "ops/sdpa.cpp"
