// DeviceCheck: one routed call's tensors on one device, as CUDA requires.
//
// A CUDA kernel raises "Expected all tensors to be on the same device, but
// found at least two devices, cuda:0 and cpu!" (TensorIterator) where a call
// mixes devices; the host backing's CPU kernels run flagos:0 + flagos:1 or
// flagos + cpu without a word, on aliases that are all CPU tensors. So every
// route checks here, with PyTorch's rule: every tensor on one device, except
// CPU tensors of no dimensions read as inputs by an operator whose CUDA
// kernel takes them (TensorIterator's CPU scalars: wrapped numbers,
// torch.tensor(2.)), and except the operators that CUDA lets mix devices
// (device_check.cpp lists them, with PyTorch's reason for each): copies, and
// the indexing operators' CPU indices (the elements of their Tensor?[]
// argument, which a CUDA kernel moves to its device).
//
// A CPU scalar other than a wrapped number is checked as CUDA checks it: an
// operator whose CUDA wrapper checks every tensor's device (native_functions.
// yaml without `device_check: NoCheck`: index_select, gather, nll_loss_forward;
// set_checked_ops), and so does an argument whose device a kernel checks
// itself (masked_fill's mask; measured on a GPU, set_checked_ops' "op:arg"
// entries). And only inputs mix: a tensor of another
// device in an argument the operator writes (its schema's `Tensor(a!)`: out=,
// the self of an in-place operator) is refused whatever its shape, as
// TensorIterator refuses an output that is not on the common device
// (`torch.exp(x, out=torch.tensor(0.))`, `cpu_total += flagos_loss`).
//
// The per-call part only notes: RoutedArgs compares each flagos argument's
// index with the first one's and notes a tensor of another device, with the
// position of its argument in the schema, while it unwraps the arguments (no
// pass of its own, no allocation); check() is one test of a flag, and the
// decision, the operator's exemptions, which arguments it writes (a fact kept
// per operator) and the message are out of line, for calls that noted
// something.
//
// A _foreach operator is the one exception to raising: CUDA's _foreach
// kernels take their fast path only where every tensor is on one device, and
// otherwise run ATen's slow path, one element at a time, whose elementwise
// calls check their own devices. So a _foreach call whose tensors noted a
// second device answers "per element" (check() returns true) instead, and the
// route runs it with run_foreach_per_element(): the same slow path, on the
// caller's flagos tensors, each element's call routed on its own device.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Device.h>
#include <c10/macros/Macros.h>
#include <cstdint>
#include <string>
#include <vector>

namespace torch_fl {
namespace route {

// The bit of a schema position in DeviceCheck's masks: no ATen schema has 64
// arguments, and one that had would share the last bit (refused rather than
// let through).
constexpr uint64_t arg_bit(size_t position) {
  return uint64_t{1} << (position < 63 ? position : 63);
}

class DeviceCheck {
 public:
  // A flagos argument on `index` where the call's first was on `first`.
  C10_ALWAYS_INLINE void flagos(c10::DeviceIndex first, c10::DeviceIndex index) {
    if (C10_UNLIKELY(index != first)) {
      note_split(first, index);
    }
  }
  // An argument that is not a flagos tensor (undefined, a wrapped number, a
  // CPU or CUDA tensor); `flagos_before`: a flagos argument came before it;
  // `arg`: the position in the schema of the argument it is (or is an
  // element of), which tells an input from an argument the operator writes.
  C10_ALWAYS_INLINE void other(const at::Tensor& t, bool flagos_before, size_t arg) {
    if (!t.defined()) {
      return;
    }
    if (!(t.is_cpu() && t.dim() == 0)) {
      note_other(t.device(), flagos_before, arg);
    } else if (!t.unsafeGetTensorImpl()->is_wrapped_number()) {
      note_cpu_scalar(flagos_before, arg);
    } else {
      wrapped_args_ |= arg_bit(arg);  // read only where a CPU scalar was noted too
    }
  }
  // An element of a Tensor?[] argument: the indices of the indexing
  // operators (index, index_put_, _unsafe_index, ...: the only ATen operators
  // that take one). A CPU tensor there is noted apart from other arguments'.
  C10_ALWAYS_INLINE void index(const at::Tensor& t, bool flagos_before) {
    if (t.defined() && !(t.is_cpu() && t.dim() == 0)) {
      note_index(t.device(), flagos_before);
    }
  }
  // Raises PyTorch's device-mismatch error (a RuntimeError) where the call's
  // tensors are on two devices and `op` may not mix them. `first`: the
  // call's first flagos index (-1: no flagos tensor, nothing to check).
  // True: `op` is a _foreach operator whose call must run element by element
  // (run_foreach_per_element); no other operator answers true.
  [[nodiscard]] C10_ALWAYS_INLINE bool check(const c10::OperatorHandle& op, c10::DeviceIndex first) const {
    return C10_UNLIKELY(noted_) && decide(op, first);
  }

 private:
  C10_NOINLINE void note_split(c10::DeviceIndex first, c10::DeviceIndex index);
  C10_NOINLINE void note_other(c10::Device device, bool flagos_before, size_t arg);
  C10_NOINLINE void note_index(c10::Device device, bool flagos_before);
  C10_NOINLINE void note_cpu_scalar(bool flagos_before, size_t arg);
  void start_notes();
  void note_device(c10::Device device, bool flagos_before);
  void note_arg(c10::Device device, size_t arg);
  C10_NOINLINE bool decide(const c10::OperatorHandle& op, c10::DeviceIndex first) const;

  c10::DeviceIndex split_first_ = -1;  // two flagos indices: the first and the first other one
  c10::DeviceIndex split_other_ = -1;
  c10::Device other_{c10::kCPU};  // the first tensor of another device type
  c10::Device non_cpu_{c10::kCPU};  // the first noted by other() on neither flagos nor the CPU (kCPU: none)
  bool has_other_ = false;
  bool other_first_ = false;  // it came before every flagos argument
  bool cpu_index_ = false;     // a CPU tensor among the elements of a Tensor?[] argument
  bool cpu_index_first_ = false;
  bool cpu_scalar_ = false;  // a CPU tensor of no dimensions, not a wrapped number
  bool cpu_scalar_first_ = false;
  bool noted_ = false;
  // The schema positions of the arguments that hold a tensor noted by other()
  // (bit min(position, 63)), and those of them on the CPU: checked against
  // the arguments the operator writes. Set by the first note (start_notes()),
  // read only once noted_: a call that notes nothing does not initialise them.
  uint64_t foreign_args_;
  uint64_t cpu_args_;
  // The positions holding a wrapped number (`torch.add(c, 2, out=x)`'s 2): a CPU scalar too, for the out= rule.
  uint64_t wrapped_args_ = 0;
};

// The same check over a boxed call's arguments, for the routes that hand the
// flagos tensors to a kernel themselves (the CPU fallback copies them to the
// host first, where nothing would check them any more). True: as
// DeviceCheck::check() (run the call with run_foreach_per_element()).
[[nodiscard]] bool check_devices(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t nargs);

// Runs a _foreach call whose tensors are on several devices (`stack`: its
// arguments, the caller's flagos tensors) as CUDA does: ATen's slow path
// (the operator's CompositeExplicitAutograd kernel, which the CPU dispatch
// key selects for every _foreach operator), whose per-element calls dispatch
// again and so each run on one device, on its operator's own route, and
// raise PyTorch's error where one element's tensors mix devices.
void run_foreach_per_element(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The same for a typed call (the operator's own C++ signature).
template <typename Ret, typename... Args, typename... Given>
Ret run_foreach_per_element(const c10::TypedOperatorHandle<Ret(Args...)>& op, Given&&... args) {
  return op.redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), std::forward<Given>(args)...);
}

// The operators whose CUDA kernels check every tensor's device, CPU scalars
// included ("name" or "name.overload"; torch_fl/vocab/device_checks.py reads
// them from PyTorch's native_functions.yaml at import), and the arguments a
// kernel checks itself ("name.overload:arg,arg", measured on a GPU).
void set_checked_ops(const std::vector<std::string>& names);

// The TensorIterator out= operators ("name.overload"): the structured ones,
// read from native_functions.yaml at import, and the rest, measured on a GPU
// (torch_fl/vocab/cpu_scalar_checks.py). An out= call of one whose tensor
// inputs are all CPU scalars, Python numbers included, raises, as
// TensorIterator does on CUDA.
void set_tensor_iterator_ops(const std::vector<std::string>& names);

}  // namespace route
}  // namespace torch_fl
