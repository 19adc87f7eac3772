// Nested tensors of the strided layout (torch.nested.nested_tensor's default,
// NestedTensorImpl) on flagos. PyTorch implements them per device
// (NestedTensorCPU and NestedTensorCUDA kernels) and has none for a
// PrivateUse1 device: a flagos one could be made, its buffer a flagos tensor,
// and then no operator ran on it, repr included ("Could not run 'aten::unbind.int'
// with arguments from the 'NestedTensorflagos' backend"). They are refused with
// a NotImplementedError that names the jagged layout (a Python subclass over
// ordinary flagos tensors, which runs on flagos) and the other ways out:
//
// - where torch.nested.nested_tensor / as_nested_tensor make one
//   (_nested_tensor_from_tensor_list with a flagos device or flagos tensors):
//   a BackendSelect kernel, because with CPU tensors and device="flagos" the
//   call dispatches to the CPU, which would move the buffer to flagos;
// - where one is made over a flagos buffer (_nested_from_padded,
//   _nested_view_from_buffer, ...: what torch.nested.as_nested_tensor of a
//   flagos tensor calls), by kernels of those operators;
// - anything else that made one (a CPU nested tensor's .to("flagos")): at its
//   first use, by the NestedTensorPrivateUse1 fallback.
#include "ops/nested.h"

#include "route/counters.h"
#include "runtime/device.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/_nested_tensor_from_tensor_list_ops.h>
#include <c10/util/Exception.h>

#include <string>

namespace torch_fl {
namespace ops {

namespace {

// `how`: how one was about to be made or used.
[[noreturn]] void raise_nested_unsupported(const std::string& how) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "flagos: nested tensors of the strided layout (torch.nested.nested_tensor's default) are not supported "
      "on flagos (", how, "): PyTorch implements them per device, CPU and CUDA, and has no kernels for them on "
      "another device. Use the jagged layout, which runs on flagos (torch.nested.nested_tensor(tensors, "
      "layout=torch.jagged, device=\"flagos\")), keep the nested tensor on the CPU, or pad it "
      "(torch.nested.to_padded_tensor) and move the padded tensor to flagos.");
}

}  // namespace

at::Tensor nested_from_tensor_list(c10::DispatchKeySet ks, at::TensorList list, std::optional<at::ScalarType> dtype,
                                   std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                   std::optional<bool> pin_memory) {
  // Without a device the nested tensor is made where the tensors are (wrap_tensor_node).
  bool on_flagos = device.has_value() && device->type() == kFlagos;
  if (!device.has_value()) {
    for (const at::Tensor& t : list) {
      on_flagos = on_flagos || (t.defined() && t.device().type() == kFlagos);
    }
  }
  if (on_flagos) {
    raise_nested_unsupported("aten::_nested_tensor_from_tensor_list (torch.nested.nested_tensor, as_nested_tensor) "
                             "would make one on " +
                             (device.has_value() ? device->str() : std::string("flagos, where its tensors are")));
  }
  return at::_ops::_nested_tensor_from_tensor_list::redispatch(
      ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::BackendSelect), list, dtype, layout,
      device, pin_memory);
}

void refuse_nested(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*) {
  raise_nested_unsupported("aten::" + route::overload_name(op.operator_name()) + " was called on one");
}

void refuse_nested_buffer(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*) {
  raise_nested_unsupported("aten::" + route::overload_name(op.operator_name()) +
                           " would make one over a flagos buffer");
}

c10::ArrayRef<const char*> nested_from_buffer_ops() {
  static constexpr const char* kNestedFromBuffer[] = {
      "_nested_from_padded",
      "_nested_tensor_from_mask",
      "_nested_view_from_buffer",
      "_nested_view_from_buffer_copy",
  };
  return kNestedFromBuffer;
}

}  // namespace ops
}  // namespace torch_fl
