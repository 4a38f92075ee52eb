// Whether a tensor may take over another's contents in place (set_data).
//
// nn.Module.to("accel"), Module._apply in general, and `tensor.data = other`
// keep the Python tensor object and swap its contents when PyTorch deems the
// two tensors' types compatible for a shallow copy. TensorImpl's own answer
// (has_compatible_shallow_copy_type) counts the dense tensors of CPU, CUDA
// and a few other built-in devices, not PrivateUse1. Without this kernel,
// moving a module to accel would replace every Parameter by a new object (an
// optimizer built before the move would keep stepping the old cpu tensors,
// as it would not for cuda), and lazy modules would lose their
// UninitializedParameters. PyTorch's hook for a backend is this operator: it
// dispatches here whenever either tensor is an accel tensor.

#include <ATen/ATen.h>
#include <torch/library.h>

namespace torch_accel {
namespace {

// A dense tensor of a device whose tensors PyTorch lets trade contents with
// one another (TensorImpl::has_compatible_shallow_copy_type's list), or of accel.
bool isDenseOnSwappableDevice(c10::DispatchKeySet keys) {
  constexpr auto backends = c10::DispatchKeySet(
      {c10::BackendComponent::CPUBit,
       c10::BackendComponent::CUDABit,
       c10::BackendComponent::MPSBit,
       c10::BackendComponent::HIPBit,
       c10::BackendComponent::XPUBit,
       c10::BackendComponent::HPUBit,
       c10::BackendComponent::MTIABit,
       c10::BackendComponent::PrivateUse1Bit});
  return keys.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && keys.has_any(backends);
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (isDenseOnSwappableDevice(self.key_set()) && isDenseOnSwappableDevice(from.key_set()));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

} // namespace
} // namespace torch_accel
