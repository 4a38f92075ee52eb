// Tensor.item(): the target reads the element (on CUDA: a copy on the current
// stream and a synchronisation of that stream, exactly as for cuda tensors).

#include <csrc/aten/TargetTensor.h>
#include <csrc/runtime/FaultInjection.h>
#include <csrc/runtime/GraphRecording.h>
#include <csrc/runtime/Runtime.h>

#include <ATen/ATen.h>
#include <ATen/ops/_local_scalar_dense_ops.h>
#include <torch/library.h>

namespace torch_accel {
namespace {

at::Scalar local_scalar_dense(const at::Tensor& self) {
  // Reads a result that a capture of this stream has not computed (on CUDA:
  // a synchronisation, which capture forbids).
  checkCurrentStreamNotRecording(self.device().index(), "Tensor.item() (a read of device memory)");
  // A copy to the host (docs/fault-injection.md).
  if (C10_UNLIKELY(copyFaultsArmed())) {
    runtime().checkCopyFault(self.device().index());
  }
  // Straight to the target's kernel (the target view has no autograd or
  // other keys to dispatch through), and the view handed back for the next
  // call: a loop that reads a scalar per step pays neither a full dispatch
  // nor a new TensorImpl per read.
  at::Tensor target = toTarget(self);
  at::Scalar value = at::_ops::_local_scalar_dense::redispatch(c10::DispatchKeySet(targetDispatchKey()), target);
  recycleTarget(std::move(target));
  return value;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
}

} // namespace
} // namespace torch_accel
