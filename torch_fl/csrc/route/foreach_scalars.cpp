// _foreach_addcmul(_) and _foreach_addcdiv(_) with a tensor of scalars
// (route/foreach_scalars.h).
//
// CUDA's kernels for the .Tensor overloads read `scalars` on the host
// (convert_tensor_to_scalar_list: "Expected scalars to be on CPU") and run the
// .ScalarList overload with the numbers. On host backing the native route
// handed the CPU kernel an alias of a flagos `scalars`, a CPU tensor, so a
// flagos tensor was taken where CUDA refuses it. Here flagos does what CUDA
// does: the CPU tensor read, then the .ScalarList operator called, which is
// routed and device-checked as any call (the lists by the one-device rule).
#include "route/foreach_scalars.h"

#include <ATen/Operators.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/ForeachUtils.h>
#include <c10/util/Exception.h>

#include <vector>

namespace torch_fl {
namespace route {

namespace {

// CUDA's conversion, with its words; a tensor on flagos (or another device)
// is refused first, with the way out.
std::vector<c10::Scalar> host_scalars(const char* op, const at::Tensor& scalars, size_t n) {
  TORCH_CHECK(scalars.device().is_cpu(), "Expected scalars to be on CPU, got ", scalars.device(),
              " instead. (in aten::", op,
              ".Tensor on flagos: the kernel reads the scalars on the host, as CUDA's does; pass a CPU tensor, "
              "e.g. scalars.cpu(), or a list of numbers)");
  return at::native::convert_tensor_to_scalar_list(scalars, static_cast<int64_t>(n));
}

std::vector<at::Tensor> foreach_addcmul(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2,
                                        const at::Tensor& scalars) {
  return at::_ops::_foreach_addcmul_ScalarList::call(self, tensor1, tensor2,
                                                     host_scalars("_foreach_addcmul", scalars, self.size()));
}

void foreach_addcmul_(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2, const at::Tensor& scalars) {
  at::_ops::_foreach_addcmul__ScalarList::call(self, tensor1, tensor2,
                                               host_scalars("_foreach_addcmul_", scalars, self.size()));
}

std::vector<at::Tensor> foreach_addcdiv(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2,
                                        const at::Tensor& scalars) {
  return at::_ops::_foreach_addcdiv_ScalarList::call(self, tensor1, tensor2,
                                                     host_scalars("_foreach_addcdiv", scalars, self.size()));
}

void foreach_addcdiv_(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2, const at::Tensor& scalars) {
  at::_ops::_foreach_addcdiv__ScalarList::call(self, tensor1, tensor2,
                                               host_scalars("_foreach_addcdiv_", scalars, self.size()));
}

}  // namespace

KernelList foreach_scalars_kernels() {
  KernelList out;
  out.push_back({"_foreach_addcmul.Tensor", torch::CppFunction(TORCH_FN(foreach_addcmul))});
  out.push_back({"_foreach_addcmul_.Tensor", torch::CppFunction(TORCH_FN(foreach_addcmul_))});
  out.push_back({"_foreach_addcdiv.Tensor", torch::CppFunction(TORCH_FN(foreach_addcdiv))});
  out.push_back({"_foreach_addcdiv_.Tensor", torch::CppFunction(TORCH_FN(foreach_addcdiv_))});
  return out;
}

}  // namespace route
}  // namespace torch_fl
