// Tensor.item(): the target reads the element (on CUDA: a copy on the current
// stream and a synchronisation of that stream, exactly as for cuda tensors).

#include <csrc/aten/TargetTensor.h>

#include <ATen/ATen.h>
#include <torch/library.h>

namespace torch_accel {
namespace {

at::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::_local_scalar_dense(toTarget(self));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
}

} // namespace
} // namespace torch_accel
