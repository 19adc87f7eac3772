// Every kernel registration of ops/ (ops/register.h); the kernels are in the
// folder's other files. Each PrivateUse1 kernel goes through
// register_core_op() (ops/core_ops.h): torch._C._dispatch_dump() names this
// file for them, and torch_fl._C._core_ops() lists them, which the routing
// layer does not route.
#include "ops/register.h"

#include "ops/autocast.h"
#include "ops/core_ops.h"
#include "ops/metadata_ops.h"
#include "ops/nested.h"
#include "ops/sdpa.h"
#include "ops/unsupported_layouts.h"
#include "runtime/device.h"
#include "runtime/library.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

namespace torch_fl {
namespace ops {

void register_metadata_ops() {
  auto& m = runtime::new_library("aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  register_core_op(m, "empty.memory_format", TORCH_FN(empty_memory_format));
  register_core_op(m, "empty_strided", TORCH_FN(empty_strided));
  register_core_op(m, "as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  register_core_op(m, "view", TORCH_FN(at::native::view));
  register_core_op(m, "_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  register_core_op(m, "unfold", TORCH_FN(at::native::unfold));
  register_core_op(m, "view_as_real", TORCH_FN(at::native::view_as_real));
  register_core_op(m, "view_as_complex", TORCH_FN(at::native::view_as_complex));
  register_core_op(m, "resize_", TORCH_FN(resize_));
  register_core_op(m, "set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  register_core_op(m, "set_.source_Storage", TORCH_FN(set_storage));
  register_core_op(m, "set_.source_Tensor", TORCH_FN(set_tensor));
  register_core_op(m, "set_", TORCH_FN(set_empty));
  register_core_op(m, "_copy_from", TORCH_FN(copy_from));
  register_core_op(m, "_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  register_core_op(m, "record_stream", TORCH_FN(record_stream));
  register_core_op(m, "_efficientzerotensor", TORCH_FN(efficientzerotensor));
  register_core_op(m, "_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));

  // copy_ is conjugate/negative-view aware and PyTorch lets it pass through
  // those keys; its flagos half (_copy_from) must too, or the fallback that
  // materialises conj views recurses into copy_ -> _copy_from forever.
  for (auto* lib : {&runtime::new_library("aten", c10::DispatchKey::Conjugate, __FILE__, __LINE__),
                    &runtime::new_library("aten", c10::DispatchKey::Negative, __FILE__, __LINE__)}) {
    lib->impl("_copy_from", torch::CppFunction::makeFallthrough());
    lib->impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
  }
}

void register_unsupported_layouts() {
  runtime::new_library("aten", c10::DispatchKey::BackendSelect, __FILE__, __LINE__)
      .impl("_nested_tensor_from_tensor_list", TORCH_FN(nested_from_tensor_list));
  auto& m = runtime::new_library("aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (const char* name : nested_from_buffer_ops()) {
    register_core_op(m, name, torch::CppFunction::makeFromBoxedFunction<&refuse_nested_buffer>());
  }
  runtime::new_library("_", c10::DispatchKey::NestedTensorPrivateUse1, __FILE__, __LINE__)
      .fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_nested>());
  // Sparse and quantized tensors, refused alike (ops/unsupported_layouts.cpp).
  for (const auto key : {c10::DispatchKey::SparsePrivateUse1, c10::DispatchKey::SparseCsrPrivateUse1}) {
    runtime::new_library("_", key, __FILE__, __LINE__)
        .fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
  }
  runtime::new_library("_", c10::DispatchKey::QuantizedPrivateUse1, __FILE__, __LINE__)
      .fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_quantized>());
}

void register_autocast() {
  // Ops outside the lists pass through autocast untouched, as for CUDA.
  runtime::new_library("_", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__)
      .fallback(torch::CppFunction::makeFallthrough());
  auto& m = runtime::new_library("aten", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
  using namespace at;  // the op-list macros name ATen types unqualified
  // The same policies and op lists as PyTorch registers for AutocastCUDA.
#define FLAGOS_LOW_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(FLAGOS_LOW_PRECISION_FP)
#define FLAGOS_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(FLAGOS_FP32)
#define FLAGOS_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(FLAGOS_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define FLAGOS_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(FLAGOS_PROMOTE)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_banned));
#undef FLAGOS_LOW_PRECISION_FP
#undef FLAGOS_FP32
#undef FLAGOS_FP32_SET_OPT_DTYPE
#undef FLAGOS_PROMOTE
}

void register_sdpa() {
  init_sdpa();
  // Both keys: AutogradPrivateUse1 for autograd-recorded calls, PrivateUse1
  // for inference mode, where the autograd keys are skipped.
  for (const auto key : {c10::DispatchKey::PrivateUse1, c10::DispatchKey::AutogradPrivateUse1}) {
    auto& lib = runtime::new_library("aten", key, __FILE__, __LINE__);
    auto add = [&](auto kernel) {
      if (key == c10::DispatchKey::PrivateUse1) {
        register_core_op(lib, "scaled_dot_product_attention", kernel);  // not routable elsewhere
      } else {
        lib.impl("scaled_dot_product_attention", kernel);
      }
    };
    if (runtime::g_backing.host) {
      add(TORCH_FN(sdpa_host));
    } else {
      add(TORCH_FN(sdpa_cuda));
    }
  }
}

}  // namespace ops
}  // namespace torch_fl
