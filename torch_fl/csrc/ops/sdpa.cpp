// scaled_dot_product_attention that takes the backing device's fused kernels.
#include "ops/sdpa.h"

#include "route/counters.h"
#include "route/native_route.h"
#include "route/routed_args.h"
#include "runtime/device.h"
#include "tensor/alias.h"

#include <ATen/ATen.h>
#include <ATen/SDPBackend.h>
#include <ATen/core/grad_mode.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/scaled_dot_product_attention_native.h>

#include <atomic>
#include <limits>

namespace torch_fl {
namespace ops {

namespace {

// ---------------------------------------------------------------- SDPA
std::optional<at::Tensor> borrow_opt(const std::optional<at::Tensor>& t) {
  if (t.has_value() && t->defined() && t->device().type() == kFlagos) {
    return tensor::native_alias(*t, /*owning=*/false);
  }
  return t;
}

at::Tensor borrow(const at::Tensor& t) {
  return t.device().type() == kFlagos ? tensor::native_alias(t, /*owning=*/false) : t.detach();
}

// PyTorch's composite SDPA asks a per-device DispatchStub which fused kernel
// fits; without an entry for flagos it always takes the math path. The
// backing device's own choice is the right one: it is the same memory.
int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  // The choice depends on which inputs need gradients (e.g. a mask that
  // requires grad rules out flash); aliases carry no autograd state, so give
  // them the flagos tensors' requires_grad.
  auto like = [](const at::Tensor& flagos, at::Tensor alias) {
    if (flagos.requires_grad() && alias.is_floating_point()) {
      alias.set_requires_grad(true);
    }
    return alias;
  };
  std::optional<at::Tensor> m = borrow_opt(mask);
  if (m.has_value() && m->defined()) {
    m = like(*mask, *m);
  }
  return at::_fused_sdp_choice(like(q, borrow(q)), like(k, borrow(k)), like(v, borrow(v)), m, dropout_p, is_causal,
                               scale, enable_gqa);
}

std::optional<at::Tensor> additive_mask(const std::optional<at::Tensor>& mask, caffe2::TypeMeta dtype,
                                        double masked_value) {
  if (!mask.has_value() || mask->dtype() != at::kBool) {
    return mask;
  }
  return at::where(mask->logical_not(), masked_value,
                   at::scalar_tensor(0.0, at::TensorOptions().dtype(dtype).device(mask->device())));
}

at::Tensor pad_last_dim_to(const at::Tensor& t, int64_t multiple) {
  const int64_t last = t.size(-1);
  if (last % multiple == 0) {
    return t;
  }
  return at::pad(t, {0, multiple - last % multiple});
}

bool needs_logsumexp(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
}

// The memory-efficient kernel wants a mask whose strides are multiples of 8.
at::Tensor aligned_mask(const at::Tensor& mask, const at::Tensor& q, const at::Tensor& k) {
  constexpr int64_t alignment = 8;
  bool aligned = mask.stride(-1) == 1;
  for (int64_t i = 0; aligned && i < mask.dim() - 1; ++i) {
    aligned = mask.stride(i) % alignment == 0;
  }
  at::Tensor out = mask;
  if (!aligned) {
    const int64_t last = mask.size(-1);
    out = at::pad(mask, {0, alignment - last % alignment}).slice(-1, 0, last);
  }
  return out.expand({q.size(0), q.size(1), q.size(2), k.size(2)});
}

// ------------------------------------------------- SDPA without autograd
// True while an attention operator (the fused kernels, the choice, SDPA
// itself) has a route of its own, to FlagGems or another backend: calls then
// take the decomposition below, which reaches that route. Set by the routing
// layer whenever routes change (torch_fl._C._set_attention_routed).
std::atomic<bool> attention_routed{false};

// The operator the shortcut counts and logs as one routed call.
c10::OperatorHandle* sdpa_handle = nullptr;
route::OpCounts* sdpa_counts = nullptr;

// No gradient to record (inference, no_grad, or no input requiring one):
// the backing device's own scaled_dot_product_attention on borrowed aliases,
// as one routed call. It makes the same choice, padding and mask handling as
// native CUDA, runs the same fused kernel, and costs one alias per input and
// one wrapped output, where the decomposition below pays a dispatcher pass
// for the choice, fresh aliases for it, and a wrap of every output of the
// fused operator (nine for cuDNN).
bool sdpa_shortcut_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const std::optional<at::Tensor>& mask) {
  if (attention_routed.load(std::memory_order_relaxed)) {
    return false;
  }
  if (at::GradMode::is_enabled()) {
    const bool mask_grad = mask.has_value() && mask->defined() && mask->requires_grad();
    if (q.requires_grad() || k.requires_grad() || v.requires_grad() || mask_grad) {
      return false;
    }
  }
  // Forward-mode AD (dual tensors) needs the decomposition too.
  const bool mask_dual = mask.has_value() && mask->defined() && mask->_fw_grad(0).defined();
  return !q._fw_grad(0).defined() && !k._fw_grad(0).defined() && !v._fw_grad(0).defined() && !mask_dual;
}

at::Tensor sdpa_shortcut(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  route::record_native_call(*sdpa_handle, sdpa_counts);
  route::RoutedArgs a;
  a.reserve(4);
  at::Tensor out;
  {
    // Their positions in scaled_dot_product_attention's schema.
    const auto qa = a.arg(q, 0);
    const auto ka = a.arg(k, 1);
    const auto va = a.arg(v, 2);
    std::optional<at::Tensor> m;
    if (mask.has_value() && mask->defined()) {
      m = a.arg_value(*mask, 3);
    }
    TORCH_INTERNAL_ASSERT(!a.check_devices(*sdpa_handle));  // true only for a _foreach operator
    try {
      out = a.result(at::scaled_dot_product_attention(*qa, *ka, *va, m, dropout_p, is_causal, scale, enable_gqa));
    } catch (const c10::Error& e) {
      route::raise_if_host_oom(e, *sdpa_handle, a);
      throw;
    }
  }
  a.release();  // after the aliases above are gone: only then are they recycled
  return out;
}

// scaled_dot_product_attention on a CUDA backing: the composite PyTorch ships
// pads and picks the flash kernel only for device type CUDA, so flagos
// tensors would take the CPU flash variant. This is the same decision,
// made for flagos, on flagos tensors (autograd records the fused ops).
at::Tensor sdpa_cuda_backed(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                            std::optional<double> scale, bool enable_gqa) {
  const auto backend = static_cast<at::SDPBackend>(fused_sdp_choice(q, k, v, mask, dropout_p, is_causal, scale,
                                                                    enable_gqa));
  const double neg_inf = -std::numeric_limits<double>::infinity();
  switch (backend) {
    case at::SDPBackend::cudnn_attention: {
      // cuDNN mishandles -inf in masks; PyTorch uses the fp16 minimum too.
      auto m = additive_mask(mask, q.dtype(), -65504.0);
      return std::get<0>(at::_scaled_dot_product_cudnn_attention(q, k, v, m, needs_logsumexp(q, k, v), dropout_p,
                                                                  is_causal, false, scale));
    }
    case at::SDPBackend::flash_attention: {
      const int64_t head_dim = q.size(-1);
      const double softmax_scale = sdp::calculate_scale(q, scale).expect_float();
      auto out = std::get<0>(at::_scaled_dot_product_flash_attention(
          pad_last_dim_to(q, 8), pad_last_dim_to(k, 8), pad_last_dim_to(v, 8), dropout_p, is_causal, false,
          softmax_scale));
      return out.size(-1) != head_dim ? out.slice(-1, 0, head_dim) : out;
    }
    case at::SDPBackend::efficient_attention: {
      auto m = additive_mask(mask, q.dtype(), neg_inf);
      if (m.has_value()) {
        m = aligned_mask(*m, q, k);
      }
      return std::get<0>(at::_scaled_dot_product_efficient_attention(q, k, v, m, needs_logsumexp(q, k, v),
                                                                     dropout_p, is_causal, scale));
    }
    case at::SDPBackend::overrideable: {
      auto m = additive_mask(mask, q.dtype(), neg_inf);
      return std::get<0>(
          at::_scaled_dot_product_fused_attention_overrideable(q, k, v, m, dropout_p, is_causal, false, scale));
    }
    case at::SDPBackend::math: {
      auto m = additive_mask(mask, q.dtype(), neg_inf);
      return std::get<0>(
          at::_scaled_dot_product_attention_math(q, k, v, m, dropout_p, is_causal, std::nullopt, scale, enable_gqa));
    }
    default:
      TORCH_CHECK(false, "No viable backend for scaled_dot_product_attention was found.");
  }
}

// flagos's scaled_dot_product_attention: the shortcut when there is no
// gradient to record, else the decomposition into flagos operators (autograd
// records them): on a CUDA backing the one above, on host memory PyTorch's own
// composite, which picks the CPU kernels through fused_sdp_choice.
template <at::Tensor (*Decomposed)(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const std::optional<at::Tensor>&, double, bool, std::optional<double>, bool)>
at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
                double dropout_p, bool is_causal, std::optional<double> scale, bool enable_gqa) {
  // On host memory the backing kernel's dropout would draw from the CPU's
  // default generator, not flagos:i's (a recomputed checkpoint then drops
  // other elements than its forward did): the decomposition draws from
  // flagos's. A CUDA kernel draws from cuda:i's, which flagos:i's wraps.
  if ((dropout_p == 0.0 || !runtime::g_backing.host) && sdpa_shortcut_applies(q, k, v, mask)) {
    return sdpa_shortcut(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
  }
  return Decomposed(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
}

}  // namespace

at::Tensor sdpa_host(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                     std::optional<double> scale, bool enable_gqa) {
  return sdpa<&at::native::scaled_dot_product_attention>(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
}

at::Tensor sdpa_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                     std::optional<double> scale, bool enable_gqa) {
  return sdpa<&sdpa_cuda_backed>(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
}

void set_attention_routed(bool routed) {
  attention_routed.store(routed, std::memory_order_relaxed);
}

bool is_attention_routed() {
  return attention_routed.load(std::memory_order_relaxed);
}

void init_sdpa() {
  at::native::_fused_sdp_choice_stub.set_privateuse1_dispatch_ptr(&fused_sdp_choice);
  static auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("aten::scaled_dot_product_attention", "");
  sdpa_handle = &handle;
  sdpa_counts = route::op_counts(handle);
}

}  // namespace ops
}  // namespace torch_fl
