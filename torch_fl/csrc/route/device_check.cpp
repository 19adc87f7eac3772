// DeviceCheck's decision and message (route/device_check.h), out of line:
// only calls whose arguments noted a second device come here.
#include "route/device_check.h"

#include "runtime/device.h"
#include "tensor/ivalue_tensors.h"

#include <c10/util/Exception.h>
#include <c10/util/flat_hash_map.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace torch_fl {
namespace route {

namespace {

// What an operator may mix that other operators may not.
enum class Mixes {
  kNothing,     // the rule: one device, CPU scalars aside
  kCpuIndices,  // CPU tensors of any shape as indices (Tensor?[] elements); other arguments by the rule
  kCpu,         // CPU tensors of any shape beside flagos ones (still one flagos device)
  kAny,         // any devices: a copy between them
};

struct Exemption {
  const char* name;      // without "aten::"
  const char* overload;  // nullptr: every overload
  Mixes mixes;
};

// The operators CUDA runs on tensors of several devices. PyTorch checks a
// CUDA operator's devices in its generated wrapper unless native_functions.yaml
// says `device_check: NoCheck`; of those, these are the ones whose kernels then
// accept another device (the rest use TensorIterator, whose CPU-scalar rule
// DeviceCheck applies to every operator). Composite operators get no wrapper
// check on CUDA: their inner operators check, which on flagos run inside the
// backing kernel, so the few composites that take a CPU tensor by design are
// listed too. Keep this list to what PyTorch's kernels document.
constexpr Exemption kExemptions[] = {
    // Copies between devices: copy_ copies across devices (copy_impl),
    // _to_copy / to are the copy with a device argument, _copy_from and
    // _copy_from_and_resize are the backend half of copy_, _foreach_copy_
    // falls back to copy_ per tensor across devices.
    {"copy_", nullptr, Mixes::kAny},
    {"_to_copy", nullptr, Mixes::kAny},
    {"to", nullptr, Mixes::kAny},
    {"_copy_from", nullptr, Mixes::kAny},
    {"_copy_from_and_resize", nullptr, Mixes::kAny},
    {"_foreach_copy_", nullptr, Mixes::kAny},
    {"_foreach_copy", nullptr, Mixes::kAny},
    // Queries that compare metadata, never data (NoCheck, no device guard).
    {"is_same_size", nullptr, Mixes::kAny},
    {"is_set_to", nullptr, Mixes::kAny},
    // Advanced indexing takes CPU indices on any device: index's meta function
    // allows indices "either on cpu or on the same device as the indexed
    // tensor" (check_indices_on_cpu_or_selfdevice), and _index_put_impl_
    // moves them to the indexed tensor's device (make_info; CUDA's
    // index_put_with_sort, for accumulate=True, in makeLinearIndex). The
    // composites over them take CPU indices as they do: _unsafe_index calls
    // index, _unsafe_index_put index_put, the masked forms those two; index_put
    // and index_put_ call _index_put_impl_. Only the indices: the values and a
    // mask are TensorIterator operands (a 0-dim CPU value is a scalar, as
    // everywhere; CUDA's accumulate path checks the values' device itself).
    {"index", "Tensor", Mixes::kCpuIndices},
    {"index", "Tensor_out", Mixes::kCpuIndices},
    {"_unsafe_index", nullptr, Mixes::kCpuIndices},
    {"_unsafe_masked_index", nullptr, Mixes::kCpuIndices},
    {"index_put_", nullptr, Mixes::kCpuIndices},
    {"index_put", nullptr, Mixes::kCpuIndices},
    {"_index_put_impl_", nullptr, Mixes::kCpuIndices},
    {"_index_put_impl", nullptr, Mixes::kCpuIndices},
    {"_unsafe_index_put", nullptr, Mixes::kCpuIndices},
    {"_unsafe_masked_index_put_accumulate", nullptr, Mixes::kCpuIndices},
    // pack_padded_sequence's lengths must be a CPU tensor (its own check says
    // so), with the input on the device.
    {"_pack_padded_sequence", nullptr, Mixes::kCpu},
    // The scalars of a _foreach addcmul/addcdiv are a CPU tensor on CUDA
    // (convert_tensor_to_scalar_list reads them on the host). The native
    // route reads them before any check (route/foreach_scalars.cpp); these
    // are for the routes that take the .Tensor overload whole (FlagGems, the
    // CPU fallback).
    {"_foreach_addcmul", "Tensor", Mixes::kCpu},
    {"_foreach_addcmul_", "Tensor", Mixes::kCpu},
    {"_foreach_addcdiv", "Tensor", Mixes::kCpu},
    {"_foreach_addcdiv_", "Tensor", Mixes::kCpu},
};

Mixes mixes_of(const c10::OperatorName& op) {
  const char* name = op.name.c_str();
  if (std::strncmp(name, "aten::", 6) != 0) {
    return Mixes::kNothing;
  }
  name += 6;
  for (const Exemption& e : kExemptions) {
    if (std::strcmp(name, e.name) == 0 && (e.overload == nullptr || op.overload_name == e.overload)) {
      return e.mixes;
    }
  }
  return Mixes::kNothing;
}

// set_checked_ops' names, read only after import has set them; `generation`
// counts the sets, so that the threads' facts below are made again.
// An entry names the operator ("name" or "name.overload"), and after a
// colon the arguments a CPU scalar is refused in ("name.overload:mask,value");
// none: every argument (its CUDA wrapper checks every device).
std::unordered_map<std::string, std::vector<std::string>>& checked_ops() {
  static std::unordered_map<std::string, std::vector<std::string>> entries;
  return entries;
}
// set_tensor_iterator_ops' names, read as checked_ops() is.
std::unordered_set<std::string>& tensor_iterator_ops() {
  static std::unordered_set<std::string> names;
  return names;
}
std::atomic<uint64_t> checked_generation{0};

// What the decision needs to know of an operator, made once per operator and
// thread: asked only for calls that noted something, but `x * torch.tensor(2.)`
// notes on every call, so it must not cost the operator's name built and
// looked up, nor a walk over its schema, each time.
struct OpFacts {
  Mixes mixes = Mixes::kNothing;
  // Its CUDA kernel checks every tensor's device, CPU scalars included.
  bool checks_every_device = false;
  // The positions where its CUDA kernel refuses a CPU scalar (every one
  // where it checks every device).
  uint64_t refuses_cpu_scalar = 0;
  // The positions of the arguments it writes (alias info with a write:
  // out=, the self of an in-place operator, a _foreach_*_ list).
  uint64_t written = 0;
  // A TensorIterator out= operator's tensor inputs (Tensor, Tensor?; not
  // lists): where every one is a CPU scalar, the call has nothing on flagos
  // to compute on.
  uint64_t out_op_inputs = 0;
  // A _foreach operator: a call over several devices runs element by element.
  bool foreach = false;
};

OpFacts facts_of(const c10::OperatorHandle& op) {
  thread_local ska::flat_hash_map<const c10::FunctionSchema*, OpFacts> known;
  thread_local uint64_t generation = 0;
  const uint64_t now = checked_generation.load(std::memory_order_acquire);
  if (generation != now) {
    known.clear();
    generation = now;
  }
  const c10::FunctionSchema* key = &op.schema();
  const auto it = known.find(key);
  if (it != known.end()) {
    return it->second;
  }
  OpFacts facts;
  const c10::OperatorName& name = op.operator_name();
  facts.mixes = mixes_of(name);
  bool tensor_iterator = false;
  if (name.name.rfind("aten::", 0) == 0) {
    facts.foreach = name.name.rfind("aten::_foreach_", 0) == 0;
    std::string entry = name.name.substr(6);
    if (!name.overload_name.empty()) {
      entry += ".";
      entry += name.overload_name;
    }
    tensor_iterator = tensor_iterator_ops().count(entry) != 0;
    const auto checked = checked_ops().find(entry);
    if (checked != checked_ops().end()) {
      facts.checks_every_device = checked->second.empty();
      facts.refuses_cpu_scalar = facts.checks_every_device ? ~uint64_t{0} : 0;
      for (const std::string& arg : checked->second) {
        const auto position = op.schema().argumentIndexWithName(arg);
        if (position.has_value()) {
          facts.refuses_cpu_scalar |= arg_bit(*position);
        }
      }
    }
  }
  const auto& args = op.schema().arguments();
  bool has_out = false;
  uint64_t tensor_inputs = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].alias_info() != nullptr && args[i].alias_info()->isWrite()) {
      facts.written |= arg_bit(i);
    }
    if (args[i].is_out()) {
      has_out = true;
      continue;
    }
    c10::TypePtr type = args[i].type();
    if (const auto optional = type->cast<c10::OptionalType>()) {
      type = optional->getElementType();
    }
    if (type->kind() == c10::TypeKind::TensorType) {
      tensor_inputs |= arg_bit(i);
    }
  }
  facts.out_op_inputs = has_out && tensor_iterator ? tensor_inputs : 0;
  known.emplace(key, facts);
  return facts;
}

[[noreturn]] void raise(const c10::OperatorHandle& op, c10::Device first, c10::Device second) {
  const auto& name = op.operator_name();
  // PyTorch's wording (TensorIterator), the same on every backing, and the operator it came from.
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ", first, " and ",
              second, "! (in ", name.name, name.overload_name.empty() ? "" : ".", name.overload_name,
              " on flagos: move the tensors to one device, e.g. with .to(\"", first, "\"))");
}

// A tensor of another device in an argument `op` writes (`written`: the
// noted positions among them). TensorIterator names the common device first
// and the output's second; the message names the argument and both ways out.
[[noreturn]] void raise_written(const c10::OperatorHandle& op, c10::Device flagos, c10::Device other,
                                uint64_t written) {
  const auto& name = op.operator_name();
  const auto& args = op.schema().arguments();
  size_t position = 0;
  while ((written & arg_bit(position)) == 0) {
    ++position;
  }
  const std::string arg = position < args.size() ? args[position].name() : std::string("?");
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ", flagos, " and ",
              other, "! (in ", name.name, name.overload_name.empty() ? "" : ".", name.overload_name,
              " on flagos: it writes its argument '", arg, "', which is on ", other,
              "; a CUDA kernel writes only to tensors on the device it runs on, and takes a CPU scalar as an input "
              "only. Write into a tensor on ",
              flagos, " and copy it to ", other, " after, or move the inputs to ", other, " with .to(\"", other,
              "\") to run the operator there)");
}

// An out= call of a TensorIterator operator whose tensor inputs are all CPU
// scalars, wrapped numbers included (`torch.add(c, 2, out=x)`):
// TensorIterator computes on the output's device and takes a CPU scalar
// beside a tensor of that device, at most one, never as the whole input.
// (Other operators may: linspace's out= reads them on the host.)
[[noreturn]] void raise_inputs_on_cpu(const c10::OperatorHandle& op, c10::Device flagos) {
  const auto& name = op.operator_name();
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ", flagos,
              " and cpu! (in ", name.name, name.overload_name.empty() ? "" : ".", name.overload_name,
              " on flagos: its inputs are all on cpu and its output on ", flagos,
              "; a CUDA kernel takes a CPU scalar as an input only beside a tensor on its own device. Move the "
              "inputs to ",
              flagos, " with .to(\"", flagos, "\"), or write into a tensor on cpu)");
}

}  // namespace

void DeviceCheck::start_notes() {
  if (!noted_) {
    foreign_args_ = 0;
    cpu_args_ = 0;
    noted_ = true;
  }
}

void DeviceCheck::note_split(c10::DeviceIndex first, c10::DeviceIndex index) {
  if (split_other_ < 0) {
    split_first_ = first;
    split_other_ = index;
  }
  start_notes();
}

void DeviceCheck::note_arg(c10::Device device, size_t arg) {
  foreign_args_ |= arg_bit(arg);
  if (device.is_cpu()) {
    cpu_args_ |= arg_bit(arg);
  } else if (non_cpu_.is_cpu()) {
    non_cpu_ = device;
  }
}

void DeviceCheck::note_device(c10::Device device, bool flagos_before) {
  if (!has_other_) {
    other_ = device;
    other_first_ = !flagos_before;
    has_other_ = true;
  }
  start_notes();
}

void DeviceCheck::note_other(c10::Device device, bool flagos_before, size_t arg) {
  note_device(device, flagos_before);
  note_arg(device, arg);
}

void DeviceCheck::note_index(c10::Device device, bool flagos_before) {
  if (!device.is_cpu()) {
    // Indices on another device are checked as any input is (no operator writes its indices).
    note_device(device, flagos_before);
    return;
  }
  if (!cpu_index_) {
    cpu_index_first_ = !flagos_before;
    cpu_index_ = true;
  }
  start_notes();
}

void DeviceCheck::note_cpu_scalar(bool flagos_before, size_t arg) {
  if (!cpu_scalar_) {
    cpu_scalar_first_ = !flagos_before;
    cpu_scalar_ = true;
  }
  start_notes();
  note_arg(c10::Device(c10::kCPU), arg);
}

bool DeviceCheck::decide(const c10::OperatorHandle& op, c10::DeviceIndex first) const {
  if (first < 0) {
    return false;  // no flagos tensor: the call is another device's (a device argument made it flagos's)
  }
  const OpFacts facts = facts_of(op);
  const Mixes mixes = facts.mixes;
  if (mixes == Mixes::kAny) {
    return false;
  }
  if (facts.foreach) {
    // CUDA's fast path needs every tensor on one device; anything else runs
    // per element, whose calls decide for themselves. The CPU tensors a
    // _foreach operator takes whole (addcmul's scalars) stay on the fast path.
    const bool only_cpu = split_other_ < 0 && !cpu_scalar_ && !cpu_index_ && other_.is_cpu() && non_cpu_.is_cpu();
    return !(mixes == Mixes::kCpu && only_cpu);
  }
  if (split_other_ >= 0) {
    raise(op, c10::Device(kFlagos, split_first_), c10::Device(kFlagos, split_other_));
  }
  const c10::Device flagos(kFlagos, first);
  // What the operator writes is on flagos, CPU scalar or not: a CUDA kernel
  // takes a 0-dim CPU tensor as an input only (TensorIterator's CPU scalars
  // are never outputs), and the operators that may mix take their CPU
  // tensors as inputs too.
  if (const uint64_t written = foreign_args_ & facts.written) {
    raise_written(op, flagos, (written & cpu_args_) != 0 ? c10::Device(c10::kCPU) : non_cpu_, written);
  }
  if (cpu_scalar_ && mixes == Mixes::kNothing && facts.out_op_inputs != 0 &&
      (facts.out_op_inputs & ~(cpu_args_ | wrapped_args_)) == 0) {
    raise_inputs_on_cpu(op, flagos);
  }
  if (has_other_ && !(mixes == Mixes::kCpu && other_.is_cpu())) {
    // Named in CUDA's order: a wrapper that checks every device names the
    // first argument's device first; TensorIterator (the operators whose
    // wrappers do not check) names the first non-CPU device first.
    if (other_first_ && (facts.checks_every_device || !other_.is_cpu())) {
      raise(op, other_, flagos);
    }
    raise(op, flagos, other_);
  }
  if (cpu_index_ && mixes == Mixes::kNothing) {
    if (cpu_index_first_) {
      raise(op, c10::Device(c10::kCPU), flagos);
    }
    raise(op, flagos, c10::Device(c10::kCPU));
  }
  // A CPU scalar input: taken by TensorIterator's operators, not by an
  // operator whose CUDA wrapper checks every device, nor in the arguments
  // whose devices a kernel checks itself.
  if (cpu_scalar_ && (mixes == Mixes::kNothing || mixes == Mixes::kCpuIndices) &&
      (cpu_args_ & facts.refuses_cpu_scalar) != 0) {
    if (cpu_scalar_first_) {
      raise(op, c10::Device(c10::kCPU), flagos);
    }
    raise(op, flagos, c10::Device(c10::kCPU));
  }
  return false;
}

void set_checked_ops(const std::vector<std::string>& names) {
  std::unordered_map<std::string, std::vector<std::string>> entries;
  for (const std::string& name : names) {
    const size_t colon = name.find(':');
    std::vector<std::string>& args = entries[name.substr(0, colon)];
    for (size_t start = colon; start != std::string::npos;) {
      const size_t end = name.find(',', start + 1);
      args.push_back(name.substr(start + 1, end == std::string::npos ? std::string::npos : end - start - 1));
      start = end;
    }
  }
  checked_ops() = std::move(entries);
  checked_generation.fetch_add(1, std::memory_order_release);
}

void set_tensor_iterator_ops(const std::vector<std::string>& names) {
  tensor_iterator_ops() = std::unordered_set<std::string>(names.begin(), names.end());
  checked_generation.fetch_add(1, std::memory_order_release);
}

bool check_devices(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t nargs) {
  DeviceCheck check;
  c10::DeviceIndex first = -1;
  size_t arg = 0;
  auto see = [&](const at::Tensor& t) {
    if (t.defined() && t.device().type() == kFlagos) {
      if (first < 0) {
        first = t.device().index();
      } else {
        check.flagos(first, t.device().index());
      }
    } else {
      check.other(t, first >= 0, arg);
    }
  };
  const size_t base = stack.size() - nargs;
  for (size_t i = base; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    arg = i - base;
    tensor::for_each_tensor(v, [&](const at::Tensor& t, tensor::TensorIn in) {
      if (in != tensor::TensorIn::kOptionalList) {
        see(t);
      } else if (t.defined()) {  // an index of a Tensor?[]: CPU ones mix where the operator takes them
        if (t.device().type() == kFlagos) {
          see(t);
        } else {
          check.index(t, first >= 0);
        }
      }
    });
  }
  return check.check(op, first);
}

void run_foreach_per_element(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

}  // namespace route
}  // namespace torch_fl
