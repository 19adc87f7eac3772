// Recurrent networks on host backing (route/host_rnn.h).
//
// nn.LSTM and nn.GRU run each step's cell through _thnn_fused_lstm_cell and
// _thnn_fused_gru_cell on an accelerator (RNN.cpp picks them for CUDA, XPU and
// PrivateUse1 inputs), and the CPU has no kernel for either: on host backing
// they are composed here from the CPU's operators, on flagos, computing what
// CUDA's kernels compute (aten/src/ATen/native/cuda/RNN.cu): the gates summed
// in the operator math type (float for half and bfloat16) in CUDA's order,
// results in the input dtype, the workspace laid out as CUDA's backward reads
// it. The backward operators follow CUDA's formulas from that workspace.
//
// _pack_padded_sequence makes batch_sizes from its CPU lengths, so on CUDA
// batch_sizes is a CPU tensor (PackedSequence requires it); one native CPU
// call would return it as flagos memory. Its composite kernel runs on flagos
// instead, where the data is flagos's and batch_sizes stays on the CPU.
#include "route/host_rnn.h"

#include "runtime/device.h"

#include <ATen/OpMathType.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_pack_padded_sequence_native.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>

#include <optional>
#include <tuple>

namespace torch_fl {
namespace route {

namespace {

at::Tensor widened(const at::Tensor& t) {
  const auto math = at::toOpMathType(t.scalar_type());
  return t.scalar_type() == math ? t : t.to(math);
}

bool has(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined();
}

// CUDA's checks (checkSizes in RNN.cu): gates of one shape, [batch, gates * hidden]; the state
// [batch, hidden]; both biases or neither, each [gates * hidden].
void check_cell(const char* op, int64_t gates, const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                const at::Tensor& state, const std::optional<at::Tensor>& input_bias,
                const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes(), op,
              ": input_gates and hidden_gates must be 2-D and of one shape, got ", input_gates.sizes(), " and ",
              hidden_gates.sizes());
  TORCH_CHECK(state.dim() == 2 && state.size(0) == input_gates.size(0) &&
                  state.size(1) * gates == input_gates.size(1),
              op, ": the state must be [batch, hidden] for gates [batch, ", gates, " * hidden], got ", state.sizes(),
              " and ", input_gates.sizes());
  TORCH_CHECK(has(input_bias) == has(hidden_bias), op, ": give both biases or neither");
  if (has(input_bias)) {
    TORCH_CHECK(input_bias->dim() == 1 && input_bias->size(0) == input_gates.size(1) &&
                    hidden_bias->sizes() == input_bias->sizes(),
                op, ": each bias must be [", input_gates.size(1), "], got ", input_bias->sizes(), " and ",
                hidden_bias->sizes());
  }
}

// input + hidden (+ input bias + hidden bias), in the math type, in CUDA's order.
at::Tensor summed_gates(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                        const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  at::Tensor g = widened(input_gates) + widened(hidden_gates);
  if (has(input_bias)) {
    g = g + widened(*input_bias);
    g = g + widened(*hidden_bias);
  }
  return g;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                         const at::Tensor& cx,
                                                         const std::optional<at::Tensor>& input_bias,
                                                         const std::optional<at::Tensor>& hidden_bias) {
  check_cell("_thnn_fused_lstm_cell", 4, input_gates, hidden_gates, cx, input_bias, hidden_bias);
  const auto g = summed_gates(input_gates, hidden_gates, input_bias, hidden_bias).chunk(4, 1);
  const at::Tensor ig = g[0].sigmoid(), fg = g[1].sigmoid(), cg = g[2].tanh(), og = g[3].sigmoid();
  const at::Tensor cy = fg * widened(cx) + ig * cg;
  const at::Tensor hy = og * cy.tanh();
  const auto dtype = input_gates.scalar_type();
  return {hy.to(dtype), cy.to(dtype), at::cat({ig, fg, cg, og}, 1).to(dtype)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                  const std::optional<at::Tensor>& grad_cy,
                                                                  const at::Tensor& cx, const at::Tensor& cy,
                                                                  const at::Tensor& workspace, bool has_bias) {
  if (!has(grad_hy) && !has(grad_cy)) {
    return {at::Tensor(), at::Tensor(), at::Tensor()};  // as CUDA's: no gradient in, none out
  }
  const auto w = widened(workspace).chunk(4, 1);
  const at::Tensor &ig = w[0], &fg = w[1], &cg = w[2], &og = w[3];
  const at::Tensor tcy = widened(cy).tanh();
  const at::Tensor ghy = has(grad_hy) ? widened(*grad_hy) : at::zeros_like(tcy);
  at::Tensor gcx = ghy * og * (1 - tcy * tcy);
  if (has(grad_cy)) {
    gcx = gcx + widened(*grad_cy);
  }
  const at::Tensor gig = gcx * cg * (1 - ig) * ig;
  const at::Tensor gfg = gcx * widened(cx) * (1 - fg) * fg;
  const at::Tensor gcg = gcx * ig * (1 - cg * cg);
  const at::Tensor gog = ghy * tcy * (1 - og) * og;
  const auto dtype = workspace.scalar_type();
  at::Tensor grad_gates = at::cat({gig, gfg, gcg, gog}, 1).to(dtype);
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0, /*keepdim=*/false) : at::Tensor();
  return {grad_gates, (gcx * fg).to(dtype), grad_bias};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                            const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                            const std::optional<at::Tensor>& hidden_bias) {
  check_cell("_thnn_fused_gru_cell", 3, input_gates, hidden_gates, hx, input_bias, hidden_bias);
  const auto i = widened(input_gates).chunk(3, 1);
  const auto h = widened(hidden_gates).chunk(3, 1);
  at::Tensor r = i[0] + h[0], z = i[1] + h[1], in = i[2], hn = h[2];
  if (has(input_bias)) {
    const auto bi = widened(*input_bias).chunk(3, 0);
    const auto bh = widened(*hidden_bias).chunk(3, 0);
    r = r + bi[0] + bh[0];
    z = z + bi[1] + bh[1];
    in = in + bi[2];
    hn = hn + bh[2];
  }
  const at::Tensor rg = r.sigmoid(), ig = z.sigmoid();
  const at::Tensor ng = (in + rg * hn).tanh();
  const at::Tensor whx = widened(hx);
  const at::Tensor hy = ng + ig * (whx - ng);
  const auto dtype = input_gates.scalar_type();
  return {hy.to(dtype), at::cat({rg, ig, ng, hn, whx}, 1).to(dtype)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(const at::Tensor& grad_hy,
                                                                                         const at::Tensor& workspace,
                                                                                         bool has_bias) {
  const auto w = widened(workspace).chunk(5, 1);
  const at::Tensor &rg = w[0], &ig = w[1], &ng = w[2], &hn = w[3], &hx = w[4];
  const at::Tensor go = widened(grad_hy);
  const at::Tensor gig = go * (hx - ng) * (1 - ig) * ig;
  const at::Tensor gin = go * (1 - ig) * (1 - ng * ng);
  const at::Tensor ghn = gin * rg;
  const at::Tensor grg = gin * hn * (1 - rg) * rg;
  const auto dtype = workspace.scalar_type();
  at::Tensor grad_input = at::cat({grg, gig, gin}, 1).to(dtype);
  at::Tensor grad_hidden = at::cat({grg, gig, ghn}, 1).to(dtype);
  at::Tensor grad_input_bias = has_bias ? grad_input.sum(0, /*keepdim=*/false) : at::Tensor();
  at::Tensor grad_hidden_bias = has_bias ? grad_hidden.sum(0, /*keepdim=*/false) : at::Tensor();
  return {grad_input, grad_hidden, (go * ig).to(dtype), grad_input_bias, grad_hidden_bias};
}

std::tuple<at::Tensor, at::Tensor> pack_padded_sequence(const at::Tensor& input, const at::Tensor& lengths,
                                                        bool batch_first) {
  return at::native::_pack_padded_sequence(input, lengths, batch_first);
}

}  // namespace

KernelList host_rnn_kernels() {
  KernelList out;
  if (!runtime::g_backing.host) {
    return out;
  }
  out.push_back({"_thnn_fused_lstm_cell", torch::CppFunction(TORCH_FN(lstm_cell))});
  out.push_back({"_thnn_fused_lstm_cell_backward_impl", torch::CppFunction(TORCH_FN(lstm_cell_backward))});
  out.push_back({"_thnn_fused_gru_cell", torch::CppFunction(TORCH_FN(gru_cell))});
  out.push_back({"_thnn_fused_gru_cell_backward", torch::CppFunction(TORCH_FN(gru_cell_backward))});
  out.push_back({"_pack_padded_sequence", torch::CppFunction(TORCH_FN(pack_padded_sequence))});
  return out;
}

}  // namespace route
}  // namespace torch_fl
