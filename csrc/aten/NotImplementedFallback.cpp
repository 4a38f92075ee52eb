// Until the alias fallback exists, an operator without an accel kernel
// raises NotImplementedError naming the operator, instead of PyTorch's
// generic "could not run ... with arguments from the 'PrivateUse1' backend".

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace torch_accel {
namespace {

void notImplemented(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "The operator '", op.schema().operator_name(), "' is not implemented for the accel device yet.");
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&notImplemented>());
}

} // namespace
} // namespace torch_accel
