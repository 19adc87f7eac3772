// The native route: run the backing device's own kernel on zero-copy aliases.
//
// Registered as the PrivateUse1 boxed fallback, so every operator without
// another registration lands here. The per-call path reads no configuration:
// two flags (log, count) and the schema the dispatcher hands in.
//
// Its kernels are registered by route/register.cpp, which holds every
// registration of route/: torch._C._dispatch_dump() names that file for the
// native route's kernels (tests/unit/test_core_layout.py tells them from the
// core's own operators by it; torch_fl/routing by torch_fl._C._core_ops()).
#include "route/native_route.h"

#include "route/counters.h"
#include "route/cpu_fallback.h"
#include "route/device_check.h"
#include "route/profiling.h"
#include "route/routed_args.h"
#include "runtime/allocator.h"
#include "runtime/cuda_driver.h"
#include "runtime/device.h"
#include "runtime/generator.h"
#include "tensor/ivalue_tensors.h"

#include <ATen/ops/native_dropout_native.h>
#include <torch/library.h>

#include <string>
#include <unordered_set>

namespace torch_fl {
namespace route {

using runtime::g_backing;

namespace {

void check_not_capturing(const c10::OperatorHandle& op, const torch::jit::Stack& stack, bool routed);
c10::DeviceIndex call_device(const torch::jit::Stack& stack, size_t first, c10::DeviceType& other);

void run_native(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  RoutedArgs args;
  args.unwrap(stack, schema.arguments().size());
  if (C10_UNLIKELY(args.check_devices(op))) {
    args.restore(stack, schema.arguments().size());
    run_foreach_per_element(op, stack);
    return;
  }
  try {
    op.redispatchBoxed(g_backing.keyset, stack);
  } catch (const c10::Error& e) {
    raise_if_host_oom(e, op, args);
    throw;
  }
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
    RouteScope scope(op);
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
  if (check_devices(op, *stack, op.schema().arguments().size())) {
    run_foreach_per_element(op, stack);
    return;
  }
  check_not_capturing(op, *stack, false);
  if (f.log_fallback) {
    log_fallback(op);
  }
  count(op, true);
  RouteScope scope(op, "cpu_fallback");
  c10::DeviceType other = c10::DeviceType::CPU;
  const c10::DeviceIndex index = call_device(*stack, stack->size() - op.schema().arguments().size(), other);
  run_on_host_copies(op, stack, index);
}

bool is_generator(const c10::Argument& arg) {
  const c10::TypePtr& t = arg.type();
  return t->kind() == c10::TypeKind::GeneratorType ||
         (t->kind() == c10::TypeKind::OptionalType &&
          t->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::GeneratorType);
}

bool takes_generator(const c10::FunctionSchema& schema) {
  for (const auto& arg : schema.arguments()) {
    if (is_generator(arg)) {
      return true;
    }
  }
  return false;
}

// The flagos device a call runs on: its first flagos tensor's or device
// argument's (a CUDA kernel's device guard takes the same), else -1; `other`
// is then the device type of its first tensor.
c10::DeviceIndex call_device(const torch::jit::Stack& stack, size_t first, c10::DeviceType& other) {
  other = c10::DeviceType::CPU;
  bool seen = false;
  for (size_t i = first; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor() && v.toTensor().defined()) {
      const c10::Device d = v.toTensor().device();
      if (d.type() == kFlagos) {
        return d.index();
      }
      if (!seen) {
        other = d.type();
        seen = true;
      }
    } else if (v.isDevice() && v.toDevice().type() == kFlagos) {
      return v.toDevice().has_index() ? v.toDevice().index() : runtime::current_device();
    }
  }
  return -1;
}

// The CPU fallback copies its inputs to the host and its results back: a
// device-to-host copy waits for the stream, which CUDA forbids on a stream
// being captured into a graph (the capture would be invalidated, and the
// host kernel could not be replayed anyway). It raises before copying
// anything, naming the operator, so the capture itself stays valid. Only the
// CPU fallback pays for the driver query; the other routes ask nothing.
void check_not_capturing(const c10::OperatorHandle& op, const torch::jit::Stack& stack, bool routed) {
  if (g_backing.host) {
    return;  // host memory has no streams to capture
  }
  c10::DeviceType other = c10::DeviceType::CPU;
  c10::DeviceIndex index = call_device(stack, stack.size() - op.schema().arguments().size(), other);
  index = index < 0 ? runtime::current_device() : index;
  if (!runtime::cuda_driver::is_capturing(runtime::cuda_driver::current_stream(index))) {
    return;
  }
  const std::string name = overload_name(op.operator_name());
  const std::string fix = routed ? "Route it to native or flaggems before capturing (torch_fl.routing.set_route(\"" +
                                       name + "\", \"native\")), or run it outside the capture."
                                 : "Run it outside the capture, or route it to flaggems if FlagGems has it.";
  TORCH_CHECK(false, "flagos: aten::", name, " runs on the cpu_fallback route (",
              routed ? "routed there" : "the backing device has no kernel for it", "), and the current stream of ",
              "flagos:", std::to_string(index), " is being captured into a CUDA graph: a graph cannot capture the ",
              "route's copies to the host and back. ", fix);
}

// Operators with a Generator argument. A flagos generator makes the
// dispatcher pick flagos (a generator's dispatch key counts), so a CPU
// operator given one lands here: it raises, as a CPU kernel does for a CUDA
// generator, rather than drawing. On host backing a CPU kernel given no
// generator would draw from the CPU's default one, which every virtual device
// would share: such calls get their flagos device's default generator instead
// (a CUDA kernel takes cuda:i's, which flagos:i's wraps). RoutedArgs::unwrap
// then hands the kernel the backing generator of the flagos one.
void native_random(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const auto& params = op.schema().arguments();
  const size_t first = stack->size() - params.size();
  c10::DeviceType other = c10::DeviceType::CPU;
  const c10::DeviceIndex index = call_device(*stack, first, other);
  for (size_t k = 0; k < params.size(); ++k) {
    c10::IValue& v = (*stack)[first + k];
    if (index < 0 && v.isGenerator()) {
      TORCH_CHECK(v.toGenerator().device().type() != kFlagos, "Expected a '", c10::DeviceTypeName(other, true),
                  "' device type for generator but found '", c10::DeviceTypeName(kFlagos, true), "' (aten::",
                  overload_name(op.operator_name()), " on no flagos tensor was given a flagos generator)");
    } else if (g_backing.host && index >= 0 && v.isNone() && is_generator(params[k])) {
      v = runtime::default_generator(index);
    }
  }
  native_fallback(op, keys, stack);
}

// native_dropout's CPU kernel draws its mask with the CPU's default generator
// and takes no generator argument (the only ATen operator with a CPU kernel
// that does). On host backing it runs on flagos instead, so its bernoulli_
// is a flagos call that draws from the device's own generator: the same
// kernel, the same numbers as on the CPU for the same seed.
// An operator that writes arguments and returns nothing
// (writes_without_returning): the native route, then its flagos tensors bumped.
void native_writing(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const WrittenArguments written(op.schema(), *stack);
  native_fallback(op, keys, stack);
  written.bump();
}

void native_writing_random(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const WrittenArguments written(op.schema(), *stack);
  native_random(op, keys, stack);
  written.bump();
}

std::tuple<at::Tensor, at::Tensor> host_native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  return at::native::native_dropout_cpu(input, p, train);
}
}  // namespace

bool writes_without_returning(const c10::FunctionSchema& schema) {
  if (!schema.returns().empty()) {
    return false;
  }
  for (const auto& arg : schema.arguments()) {
    if (arg.alias_info() != nullptr && arg.alias_info()->isWrite()) {
      return true;
    }
  }
  return false;
}

WrittenArguments::WrittenArguments(const c10::FunctionSchema& schema, const torch::jit::Stack& stack) {
  const auto& params = schema.arguments();
  const size_t first = stack.size() - params.size();
  auto keep = [this](const at::Tensor& t) {
    if (t.defined() && t.device().type() == kFlagos) {
      tensors_.push_back(t);
    }
  };
  for (size_t k = 0; k < params.size(); ++k) {
    if (params[k].alias_info() == nullptr || !params[k].alias_info()->isWrite()) {
      continue;
    }
    tensor::for_each_tensor(stack[first + k], [&](const at::Tensor& t, tensor::TensorIn) { keep(t); });
  }
}

void WrittenArguments::bump() const {
  for (const at::Tensor& t : tensors_) {
    t.unsafeGetTensorImpl()->bump_version();  // raises for an inference tensor outside inference_mode
  }
}

void run_native_route(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  native_fallback(op, ks, stack);
}

void call_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // cpu_fallback copies every tensor to the host, where nothing would see their devices any more.
  if (check_devices(op, *stack, op.schema().arguments().size())) {
    run_foreach_per_element(op, stack);
    return;
  }
  check_not_capturing(op, *stack, true);
  if (g_route_flags.log_fallback) {
    log_fallback(op);
  }
  // The CPU kernel takes the generator a flagos generator draws from (on host
  // backing a CPU one; a CUDA one raises there, as it would on the CPU).
  for (size_t i = stack->size() - op.schema().arguments().size(); i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isGenerator() && v.toGenerator().device().type() == kFlagos) {
      v = runtime::backing_generator(v.toGenerator());
    }
  }
  count(op, true);
  RouteScope scope(op, "cpu_fallback");
  c10::DeviceType other = c10::DeviceType::CPU;
  const c10::DeviceIndex index = call_device(*stack, stack->size() - op.schema().arguments().size(), other);
  try {
    run_on_host_copies(op, stack, index);
  } catch (const c10::Error& e) {
    raise_if_host_oom(e, op, index);
    throw;
  }
}

void raise_if_host_oom(const c10::Error& e, const c10::OperatorHandle& op, c10::DeviceIndex index) {
  if (!g_backing.host || dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) {
    return;  // CUDA's allocator raises its own; flagos's own allocations are counted where they fail
  }
  // c10::alloc_cpu's two refusals (DefaultCPUAllocator), by their words: c10 gives them no type of their own.
  const std::string& msg = e.msg();
  if (msg.find("DefaultCPUAllocator: ") == std::string::npos &&
      msg.find("alloc_cpu() seems to have been called with negative number") == std::string::npos) {
    return;
  }
  const c10::DeviceIndex i = index < 0 ? runtime::current_device() : index;
  runtime::raise_host_oom(i, "flagos: out of memory on flagos:" + std::to_string(i) + " (host memory) in aten::" +
                                 overload_name(op.operator_name()) + ": " + e.what_without_backtrace());
}

namespace {

// True for view operators: those whose results may view an input (an input
// annotated Tensor(a) without '!': transpose, split, expand, ...) and the
// in-place views, which change only their input's sizes and strides
// (transpose_, unsqueeze_, as_strided_, ...: tagged inplace_view). Their
// composite kernels work on any tensor's metadata. A native kernel would
// read the data pointer of an alias, which fake and functional tensors do
// not have: torch.compile replays in-place views on such tensors.
bool is_view_op(const c10::OperatorHandle& op) {
  if (op.hasTag(at::Tag::inplace_view)) {
    return true;
  }
  for (const auto& arg : op.schema().arguments()) {
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
         op.hasComputedKernelForDispatchKey(g_backing.key) && !is_view_op(op);
}

torch::CppFunction native_route_fallback() {
  return torch::CppFunction::makeFromBoxedFunction<&native_fallback>();
}

KernelList native_route_host_kernels() {
  KernelList out;
  if (g_backing.host) {
    out.push_back({"native_dropout", torch::CppFunction(TORCH_FN(host_native_dropout))});
  }
  return out;
}

KernelList native_route_direct_kernels() {
  KernelList out;
  auto& dispatcher = c10::Dispatcher::singleton();
  // Operators any overload of which takes a Generator: randn draws as
  // randn.generator does.
  std::unordered_set<std::string> random_names;
  for (const auto& name : dispatcher.getAllOpNames()) {
    auto op = dispatcher.findOp(name);
    if (op && name.name.rfind("aten::", 0) == 0 && takes_generator(op->schema())) {
      random_names.insert(name.name);
    }
  }
  for (const auto& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) {
      continue;
    }
    auto op = dispatcher.findOp(name);
    if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      continue;
    }
    // On host backing a random operator without a generator argument (randn,
    // rand_like, randperm, ...) decomposes on flagos, so that it draws through
    // a flagos call (normal_, random_, randperm.generator_out) with the
    // device's generator, not inside a CPU composite with the CPU's default one.
    const bool draws = takes_generator(op->schema());
    const bool host_random = g_backing.host && !draws && random_names.count(name.name) > 0;
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
    // Composites that answer by the tensor's own device stay composite on
    // flagos, where they see a flagos tensor as CUDA's see a CUDA one:
    // is_pinned() is False and _pin_memory raises "only dense CPU tensors can
    // be pinned". Run on a host backing's alias, a CPU tensor, they pinned it.
    const bool by_own_device = name.name == "aten::is_pinned" || name.name == "aten::_pin_memory";
    // Other composite operators (abs, mul.Scalar, zeros, ones_like,
    // constant_pad_nd, embedding, ...) run as one native call too: their
    // decomposition then happens on the backing device, with no flagos cost
    // per inner operator, and the dispatch log names the operator called
    // (FEP 0025 scripts expect `abs -> cuda`, not `abs.out -> cuda`). Views
    // stay composite on flagos, where they are cheapest.
    const bool whole = composite && op->hasComputedKernelForDispatchKey(g_backing.key) && !is_view_op(*op) &&
                       name.name != "aten::_unsafe_view" && !host_random && !by_own_device;
    // A backing kernel that takes a generator (normal_, uniform_,
    // multinomial, ...) is registered as native_random, not left to the
    // fallback, which does not look for generators.
    const bool random_kernel = draws && op->hasKernelForDispatchKey(g_backing.key) &&
                               !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
    const bool writes = writes_without_returning(op->schema()) &&
                        !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
    if (!device_switch && !whole && !random_kernel && !writes &&
        (!composite || !op->hasKernelForDispatchKey(g_backing.key) || host_random)) {
      continue;
    }
    std::string qualified = name.name.substr(6);
    if (!name.overload_name.empty()) {
      qualified += "." + name.overload_name;
    }
    if (writes) {
      out.push_back({qualified, draws ? torch::CppFunction::makeFromBoxedFunction<&native_writing_random>()
                                      : torch::CppFunction::makeFromBoxedFunction<&native_writing>()});
    } else if (draws) {
      out.push_back({qualified, torch::CppFunction::makeFromBoxedFunction<&native_random>()});
    } else {
      out.push_back({qualified, torch::CppFunction::makeFromBoxedFunction<&native_fallback>()});
    }
  }
  return out;
}

}  // namespace route
}  // namespace torch_fl
