// The operators with typed kernels, as an X-macro over their at::_ops names:
// the native route registers one per operator (route/typed_native.cpp), its
// autograd kernel (autograd/autograd_shortcut.cpp), and a route to a Python
// backend gets a typed front beside its boxed kernel
// (python/typed_fronts.cpp). What Qwen3 (and most transformers) call per
// token, per training step and per optimizer step, what a mixture-of-experts
// layer (top-k routing, sorting tokens by expert, grouped matrix products) and
// sampling (top-k/top-p, .item()) add; the out= matrix products are what
// torch.compile's generated code calls (extern_kernels.mm(..., out=)). A call
// of another operator takes the boxed route (route/native_route.cpp): the same
// behaviour, some tenths of a microsecond more per call.
// Views are not here: they stay metadata operations on flagos.
#pragma once

// clang-format off
#define FLAGOS_TYPED_OPS(X) \
  /* linear layers, attention */ \
  X(mm) X(bmm) X(addmm) X(baddbmm) X(mm_out) X(bmm_out) X(addmm_out) X(baddbmm_out) \
  X(_scaled_dot_product_cudnn_attention) \
  X(_scaled_dot_product_cudnn_attention_backward) X(_scaled_dot_product_flash_attention) \
  X(_scaled_dot_product_flash_attention_backward) X(_scaled_dot_product_efficient_attention) \
  X(_scaled_dot_product_efficient_attention_backward) X(_scaled_dot_product_flash_attention_for_cpu) \
  X(_scaled_dot_product_flash_attention_for_cpu_backward) \
  /* elementwise */ \
  X(add_Tensor) X(add__Tensor) X(add_Scalar) X(sub_Tensor) X(rsub_Scalar) X(mul_Tensor) X(mul__Tensor) \
  X(mul_Scalar) X(mul__Scalar) X(div_Tensor) X(div__Tensor) X(div_Scalar) X(pow_Tensor_Scalar) X(rsqrt) \
  X(sqrt) X(neg) X(abs) X(exp) X(cos) X(sin) X(tanh) X(sigmoid) X(silu) X(silu_backward) X(gelu) \
  X(gelu_backward) X(where_self) X(masked_fill_Scalar) X(masked_fill__Scalar) X(eq_Scalar) X(eq_Tensor) \
  X(ne_Scalar) X(ne_Tensor) X(lt_Scalar) X(le_Scalar) X(gt_Scalar) X(ge_Scalar) X(bitwise_and_Tensor) \
  X(bitwise_or_Tensor) X(bitwise_not) X(logical_not) X(fill__Scalar) X(zero_) X(lt_Tensor) X(le_Tensor) \
  X(gt_Tensor) X(ge_Tensor) X(sigmoid_backward) \
  /* reductions, normalisation, losses */ \
  X(mean_dim) X(sum) X(sum_dim_IntList) X(amax) X(max) X(argmax) X(all) X(any) X(cumsum) X(_softmax) \
  X(_softmax_backward_data) X(_log_softmax) X(_log_softmax_backward_data) X(nll_loss_forward) \
  X(nll_loss_backward) X(native_layer_norm) X(native_layer_norm_backward) X(equal) X(_local_scalar_dense) \
  /* mixture-of-experts routing, sampling (top-k, top-p) */ \
  X(topk) X(sort) X(sort_stable) X(max_dim) X(gather) X(scatter_src) X(scatter_value) X(_grouped_mm) X(histc) \
  /* data movement, factories, embeddings */ \
  X(copy_) X(_to_copy) X(clone) X(cat) X(index_select) X(index_Tensor) X(embedding) \
  X(embedding_dense_backward) X(full) X(zeros) X(ones) X(arange) X(arange_start) X(ones_like) X(zeros_like) \
  X(index_put_) X(_index_put_impl_) \
  X(triu) X(tril) X(stack) X(constant_pad_nd) X(slice_backward) \
  /* optimizer steps (foreach AdamW/SGD) */ \
  X(_foreach_add__Scalar) X(_foreach_add__List) X(_foreach_mul__Scalar) X(_foreach_mul__Tensor) \
  X(_foreach_lerp__Scalar) X(_foreach_addcmul__Scalar) X(_foreach_addcdiv__ScalarList) \
  X(_foreach_div__ScalarList) X(_foreach_sqrt) X(_foreach_add__ScalarList)
// clang-format on
