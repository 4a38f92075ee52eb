// Convolutions on accel.
//
// ATen picks a convolution backend by device type; for PrivateUse1 it calls
// convolution_overrideable and convolution_backward_overrideable. accel runs
// them as the target's own aten::convolution / aten::convolution_backward,
// which pick the backend the target would (cuDNN on CUDA, the CPU paths on
// the host runtime), so accel convolutions are the target's, bit for bit.

#include <csrc/aten/AliasFallback.h>

#include <torch/library.h>

namespace torch_accel {
namespace {

void convolutionOverrideable(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  // The two schemas take the same arguments in the same order.
  static const auto convolution = c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
  runOnTarget(convolution, stack);
}

void convolutionBackwardOverrideable(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
  //   transposed, output_padding, groups, output_mask)
  // convolution_backward(grad_output, input, weight, bias_sizes, stride, ...)
  // bias_sizes, the bias shape, is the number of output channels.
  static const auto backward = c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution_backward", "");
  const size_t first = stack->size() - op.schema().arguments().size();
  const at::Tensor& weight = (*stack)[first + 2].toTensor();
  const bool transposed = (*stack)[first + 6].toBool();
  const int64_t groups = (*stack)[first + 8].toInt();
  const int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
  stack->insert(stack->begin() + static_cast<std::ptrdiff_t>(first + 3), c10::IValue(std::vector<int64_t>{channels}));
  runOnTarget(backward, stack);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", torch::CppFunction::makeFromBoxedFunction<&convolutionOverrideable>());
  m.impl(
      "convolution_backward_overrideable",
      torch::CppFunction::makeFromBoxedFunction<&convolutionBackwardOverrideable>());
}

} // namespace
} // namespace torch_accel
