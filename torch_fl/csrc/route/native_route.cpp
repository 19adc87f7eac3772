// The native route: run the backing device's own kernel on zero-copy aliases.
//
// Registered as the PrivateUse1 boxed fallback, so every operator without
// another registration lands here. The per-call path reads no configuration:
// two flags (log, count) and the schema the dispatcher hands in.
//
// torch_fl/routing tells the native route's registrations from the core's own
// operators by this file's name in torch._C._dispatch_dump() (and by
// torch_fl._C._core_ops()): keep the registrations here.
#include "route/native_route.h"

#include "route/counters.h"
#include "route/device_check.h"
#include "route/routed_args.h"
#include "route/typed_native.h"
#include "runtime/device.h"
#include "runtime/library.h"

#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <string>

namespace torch_fl {
namespace route {

using runtime::g_backing;

namespace {

void run_native(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  RoutedArgs args;
  args.unwrap(stack, schema.arguments().size());
  args.check_devices(op);
  op.redispatchBoxed(g_backing.keyset, stack);
  args.finish(schema, stack);
}

void native_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const RouteFlags& f = g_route_flags;
  if (C10_LIKELY(op.hasComputedKernelForDispatchKey(g_backing.key))) {
    if (C10_UNLIKELY(f.log_dispatch)) {
      log_dispatch(op);
    }
    if (f.count) {
      count(op, false);
    }
    run_native(op, stack);
    return;
  }
  // The backing device has no kernel for this operator.
  const std::string name = overload_name(op.operator_name());
  TORCH_CHECK_NOT_IMPLEMENTED(!f.strict, "flagos: aten::", name, " has no ", c10::DeviceTypeName(g_backing.type, true),
                              " kernel and FLAGOS_STRICT=1 forbids the CPU fallback. Unset FLAGOS_STRICT to run it on "
                              "the host, or route it to a backend that has it.");
  TORCH_CHECK_NOT_IMPLEMENTED(!g_backing.host, "flagos: aten::", name,
                              " has no CPU kernel, so the host-backed flagos device cannot run it either.");
  check_devices(op, *stack, op.schema().arguments().size());
  if (f.log_fallback) {
    log_fallback(op);
  }
  count(op, true);
  at::native::cpu_fallback(op, stack);
}
}  // namespace

void call_native(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (g_route_flags.count) {
    count(op, false);
  }
  run_native(op, stack);
}

void call_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // cpu_fallback copies every tensor to the host, where nothing would see their devices any more.
  check_devices(op, *stack, op.schema().arguments().size());
  if (g_route_flags.log_fallback) {
    log_fallback(op);
  }
  count(op, true);
  at::native::cpu_fallback(op, stack);
}

namespace {

// True for operators whose results may view an input (an input annotated
// Tensor(a) without '!'): transpose, split, expand, ...
bool makes_views(const c10::FunctionSchema& schema) {
  for (const auto& arg : schema.arguments()) {
    if (arg.alias_info() != nullptr && !arg.alias_info()->isWrite()) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool native_route_may_own(const c10::OperatorHandle& op) {
  return !op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
         op.hasComputedKernelForDispatchKey(g_backing.key) && !makes_views(op.schema());
}

void register_native_route() {
  runtime::new_library("_", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__)
      .fallback(torch::CppFunction::makeFromBoxedFunction<&native_fallback>());

  // PyTorch registers, for every backend, kernels that implement the
  // functional and in-place forms of structured ops through their out= form
  // (CompositeExplicitAutogradNonFunctional). On flagos those would turn
  // add.Tensor into empty + add.out. Where the backing device has its own
  // kernel, route the op itself natively: one kernel call, and the dispatch
  // log names the operator the user called.
  auto& direct_library = runtime::new_library("aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  // The hottest operators get typed kernels first: the loop below skips
  // operators that already have a PrivateUse1 kernel.
  register_typed_native_route(direct_library);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const auto& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) {
      continue;
    }
    auto op = dispatcher.findOp(name);
    if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      continue;
    }
    // A backing kernel beside a composite one (native_layer_norm, addr,
    // native_group_norm have CPU + CompositeExplicitAutograd): without this,
    // flagos would run the composite decomposition and differ from native.
    const bool composite = op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
                           op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd);
    // Composite kernels that choose a backend by device type and would pick
    // the *_overrideable hook on PrivateUse1 (NotImplemented): run them on
    // the backing device, where they pick its own convolution.
    // copy_ and _to_copy are composites that would run copy_impl twice (on
    // flagos, then on the backing device through _copy_from): one native
    // call does the same work.
    const bool device_switch = name.overload_name.empty() &&
                               (name.name == "aten::convolution" || name.name == "aten::convolution_backward" ||
                                name.name == "aten::_convolution" || name.name == "aten::copy_" ||
                                name.name == "aten::_to_copy");
    // Other composite operators (abs, mul.Scalar, zeros, ones_like,
    // constant_pad_nd, embedding, ...) run as one native call too: their
    // decomposition then happens on the backing device, with no flagos cost
    // per inner operator, and the dispatch log names the operator called
    // (FEP 0025 scripts expect `abs -> cuda`, not `abs.out -> cuda`). Views
    // stay composite on flagos, where they are cheapest.
    const bool whole = composite && op->hasComputedKernelForDispatchKey(g_backing.key) && !makes_views(op->schema()) &&
                       name.name != "aten::_unsafe_view";
    if (!device_switch && !whole && (!composite || !op->hasKernelForDispatchKey(g_backing.key))) {
      continue;
    }
    std::string qualified = name.name.substr(6);
    if (!name.overload_name.empty()) {
      qualified += "." + name.overload_name;
    }
    direct_library.impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&native_fallback>());
  }
}

}  // namespace route
}  // namespace torch_fl
