// Copies between accel and any other device, and between accel devices.
//
// Accel tensors are seen as target tensors over the same memory and the
// target's own copy_ does the work: dtype conversion, broadcasting,
// non-contiguous layouts, pinned-memory and non_blocking semantics, peer
// copies between devices and stream ordering (on the current stream, which
// on the CUDA runtime is the current accel stream) are all the target's.

#include <csrc/aten/TargetTensor.h>
#include <csrc/profiler/DeviceActivity.h>

#include <ATen/ATen.h>
#include <torch/library.h>

#include <string>

namespace torch_accel {
namespace {

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  // The copy is an accel kernel in profiler traces (see DeviceActivity.h).
  static const std::string kCopy = "aten::copy_";
  const auto& accel = dst.device().type() == c10::DeviceType::PrivateUse1 ? dst : self;
  RecordDeviceActivity kernel(kCopy, accel.device().index());
  toTargetIfAccel(dst).copy_(toTargetIfAccel(self), non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, /*non_blocking=*/false);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
}

// copy_ leaves lazily conjugated or negated sources to the kernel that does
// the copying, and so do these: the target's copy_ resolves the bits (target
// views carry them). Without this, the conjugate/negative fallbacks would
// resolve a source by cloning it, which copies through _copy_from again,
// forever. Only out-of-tree backends reach _copy_from, so CPU and CUDA
// copies are unaffected.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

} // namespace
} // namespace torch_accel
