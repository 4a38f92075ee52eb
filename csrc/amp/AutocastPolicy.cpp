// Autocast on accel: CUDA's policy, whichever runtime backs accel.
//
// accel stands in for a CUDA device, so torch.autocast("accel") must cast
// exactly the operators CUDA's autocast casts, the same way. The operator
// lists come from PyTorch's own AT_FORALL_* macros in ATen/autocast_mode.h,
// the ones its AutocastCUDA registration expands, so accel's lists are CUDA's
// by construction and follow PyTorch when the lists change. The wrappers are
// PyTorch's too (at::autocast::WrapFunction for PrivateUse1): they cast
// floating-point accel tensors to get_autocast_dtype("accel") (float16 unless
// set otherwise, as on CUDA) or to float32, cache casts of leaf weights, and
// redispatch below autocast, where the alias fallback runs the target kernel.
//
// Beyond the macros, CUDA's registration adds two convolutions and bans
// binary_cross_entropy; accel does the same. (CUDA also wraps _cudnn_rnn, in
// a separate file: accel's RNNs never call it, as ATen only picks cuDNN RNNs
// for cuda tensors.) test/test_autocast.py compares the registered operator
// set with CUDA's.

#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torch_accel {
namespace {

// CUDA bans binary_cross_entropy under autocast (its inputs are typically
// float16 probabilities, which it cannot compute safely); the kernel only
// raises, explaining what to use instead. accel raises the same error by
// running CUDA's kernel for it, so the message is CUDA's word for word.
void binaryCrossEntropyBanned(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::AutocastCUDA), stack);
}

// Operators outside the policy run as if autocast were off.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  // Run in the autocast dtype.
#define TORCH_ACCEL_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(TORCH_ACCEL_LOWER_PRECISION_FP)
  TORCH_ACCEL_LOWER_PRECISION_FP(cudnn_convolution)
  TORCH_ACCEL_LOWER_PRECISION_FP(cudnn_convolution_transpose)
#undef TORCH_ACCEL_LOWER_PRECISION_FP

  // Run in float32.
#define TORCH_ACCEL_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(TORCH_ACCEL_FP32)
#undef TORCH_ACCEL_FP32

  // Reductions with an optional output dtype: float32 unless one is given.
#define TORCH_ACCEL_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(TORCH_ACCEL_FP32_SET_OPT_DTYPE)
#undef TORCH_ACCEL_FP32_SET_OPT_DTYPE

  // norm overloads without a dtype: redispatched to the overload with one, float32.
  // (The macro spells the signatures with ATen's unqualified type names.)
  using at::DimnameList;
  using at::IntArrayRef;
  using at::Scalar;
  using at::ScalarType;
  using at::Tensor;
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

  // Run in the widest floating-point type among the arguments.
#define TORCH_ACCEL_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(TORCH_ACCEL_PROMOTE)
#undef TORCH_ACCEL_PROMOTE

  m.impl("binary_cross_entropy", torch::CppFunction::makeFromBoxedFunction<&binaryCrossEntropyBanned>());
}

} // namespace
} // namespace torch_accel
