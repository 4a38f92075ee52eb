#include <csrc/aten/NestedTargetTensor.h>

#include <ATen/NestedTensorImpl.h>

namespace torch_accel {

at::Tensor bufferOf(const at::Tensor& nested) {
  return at::native::get_nested_tensor_impl(nested)->get_unsafe_storage_as_tensor();
}

at::Tensor nestedOver(const at::Tensor& buffer, const at::Tensor& like) {
  const at::native::NestedTensorImpl* impl = at::native::get_nested_tensor_impl(like);
  // The keys follow the buffer's: its backend, and autograd where it has it.
  return at::Tensor(c10::make_intrusive<at::native::NestedTensorImpl>(
      buffer, impl->get_nested_sizes(), impl->get_nested_strides(), impl->get_storage_offsets()));
}

} // namespace torch_accel
