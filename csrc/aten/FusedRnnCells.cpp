// The fused LSTM and GRU cells, for targets that have no kernels for them.
//
// ATen computes RNN cells (nn.LSTM, nn.GRU, LSTMCell, GRUCell) for
// PrivateUse1 tensors as for CUDA tensors: the two matrix products, then one
// fused operator for the gates (_thnn_fused_lstm_cell / _thnn_fused_gru_cell)
// whose backward operators read a workspace the forward saved. Only CUDA
// implements those operators; on the CPU, ATen computes cells unfused. So
// where the target is the CPU (the host runtime) accel provides them, built
// from ATen operators on accel tensors with CUDA's semantics and workspace
// layout; where the target has them (CUDA) the alias fallback runs the
// target's. The result is the CPU's unfused arithmetic in another order:
// equal within rounding, not bitwise.

#include <csrc/aten/FusedRnnCells.h>
#include <csrc/runtime/Runtime.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <tuple>

namespace torch_accel {
namespace {

// input_gates + hidden_gates (+ both biases), as the fused kernels add them.
at::Tensor gatesWithBiases(
    const at::Tensor& input_gates,
    const at::Tensor& hidden_gates,
    const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias) {
  at::Tensor gates = input_gates + hidden_gates;
  if (input_bias.has_value() && input_bias->defined()) {
    gates = gates + *input_bias;
  }
  if (hidden_bias.has_value() && hidden_bias->defined()) {
    gates = gates + *hidden_bias;
  }
  return gates;
}

// Returns (hy, cy, workspace); workspace holds the activated gates
// [input, forget, cell, output] side by side, as CUDA's kernel saves them.
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCell(
    const at::Tensor& input_gates,
    const at::Tensor& hidden_gates,
    const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias) {
  const auto gates = gatesWithBiases(input_gates, hidden_gates, input_bias, hidden_bias).chunk(4, 1);
  const at::Tensor ingate = gates[0].sigmoid();
  const at::Tensor forgetgate = gates[1].sigmoid();
  const at::Tensor cellgate = gates[2].tanh();
  const at::Tensor outgate = gates[3].sigmoid();
  at::Tensor cy = forgetgate * cx + ingate * cellgate;
  at::Tensor hy = outgate * cy.tanh();
  return {std::move(hy), std::move(cy), at::cat({ingate, forgetgate, cellgate, outgate}, 1)};
}

// Returns (grad of the gates, grad of cx, grad of the bias or undefined).
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCellBackward(
    const std::optional<at::Tensor>& grad_hy,
    const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx,
    const at::Tensor& cy,
    const at::Tensor& workspace,
    bool has_bias) {
  const auto saved = workspace.chunk(4, 1);
  const at::Tensor &ingate = saved[0], &forgetgate = saved[1], &cellgate = saved[2], &outgate = saved[3];
  const bool has_grad_hy = grad_hy.has_value() && grad_hy->defined();
  const at::Tensor tanh_cy = cy.tanh();
  // d(loss)/d(cy): from cy itself and through hy = outgate * tanh(cy).
  at::Tensor grad_c = (grad_cy.has_value() && grad_cy->defined()) ? *grad_cy : at::zeros_like(cy);
  at::Tensor grad_outgate = at::zeros_like(outgate);
  if (has_grad_hy) {
    grad_c = grad_c + *grad_hy * outgate * (1 - tanh_cy * tanh_cy);
    grad_outgate = *grad_hy * tanh_cy * (1 - outgate) * outgate;
  }
  at::Tensor grad_gates = at::cat(
      {grad_c * cellgate * (1 - ingate) * ingate,
       grad_c * cx * (1 - forgetgate) * forgetgate,
       grad_c * ingate * (1 - cellgate * cellgate),
       grad_outgate},
      1);
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {std::move(grad_gates), grad_c * forgetgate, std::move(grad_bias)};
}

// Returns (hy, workspace); workspace holds [reset gate, update gate, new
// gate, hx, hidden new gate with its bias] side by side, as CUDA's kernel
// saves them.
std::tuple<at::Tensor, at::Tensor> gruCell(
    const at::Tensor& input_gates,
    const at::Tensor& hidden_gates,
    const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias) {
  auto input = input_bias.has_value() && input_bias->defined() ? input_gates + *input_bias : input_gates;
  auto hidden = hidden_bias.has_value() && hidden_bias->defined() ? hidden_gates + *hidden_bias : hidden_gates;
  const auto in = input.chunk(3, 1);
  const auto hn = hidden.chunk(3, 1);
  const at::Tensor resetgate = (in[0] + hn[0]).sigmoid();
  const at::Tensor updategate = (in[1] + hn[1]).sigmoid();
  const at::Tensor newgate = (in[2] + resetgate * hn[2]).tanh();
  at::Tensor hy = newgate + updategate * (hx - newgate);
  return {std::move(hy), at::cat({resetgate, updategate, newgate, hx, hn[2]}, 1)};
}

// Returns the grads of (input gates, hidden gates, hx, input bias, hidden
// bias); the biases' are undefined without biases.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
gruCellBackward(const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  const auto saved = workspace.chunk(5, 1);
  const at::Tensor &resetgate = saved[0], &updategate = saved[1], &newgate = saved[2], &hx = saved[3],
                   &hidden_newgate = saved[4];
  const at::Tensor grad_update = grad_hy * (hx - newgate) * (1 - updategate) * updategate;
  const at::Tensor grad_new = grad_hy * (1 - updategate) * (1 - newgate * newgate);
  const at::Tensor grad_reset = grad_new * hidden_newgate * (1 - resetgate) * resetgate;
  at::Tensor grad_input_gates = at::cat({grad_reset, grad_update, grad_new}, 1);
  at::Tensor grad_hidden_gates = at::cat({grad_reset, grad_update, grad_new * resetgate}, 1);
  at::Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : at::Tensor();
  at::Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
  return {
      std::move(grad_input_gates),
      std::move(grad_hidden_gates),
      grad_hy * updategate,
      std::move(grad_input_bias),
      std::move(grad_hidden_bias)};
}

} // namespace

void provideFusedRnnCellsTheTargetLacks() {
  static std::once_flag registered;
  std::call_once(registered, [] {
    const auto target_key = c10::computeDispatchKey(std::nullopt, at::kStrided, targetDevice(0));
    auto lacks = [&](const char* name) {
      const auto op = c10::Dispatcher::singleton().findOp(c10::OperatorName(name, ""));
      return op.has_value() && !op->hasKernelForDispatchKey(target_key);
    };
    static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    if (lacks("aten::_thnn_fused_lstm_cell")) {
      library.impl("_thnn_fused_lstm_cell", TORCH_FN(lstmCell));
      library.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(lstmCellBackward));
    }
    if (lacks("aten::_thnn_fused_gru_cell")) {
      library.impl("_thnn_fused_gru_cell", TORCH_FN(gruCell));
      library.impl("_thnn_fused_gru_cell_backward", TORCH_FN(gruCellBackward));
    }
  });
}

} // namespace torch_accel
