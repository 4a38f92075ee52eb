#include <csrc/aten/TargetTensor.h>
#include <csrc/runtime/Runtime.h>

#include <c10/core/TensorImpl.h>

namespace torch_accel {
namespace {

c10::intrusive_ptr<c10::TensorImpl>
targetImpl(void* data, size_t nbytes, c10::DeviceIndex device_index, caffe2::TypeMeta dtype, bool resizable = false) {
  const c10::Device device = targetDevice(device_index);
  c10::Storage storage(
      c10::Storage::use_byte_size_t(),
      nbytes,
      c10::DataPtr(data, device),
      resizable ? runtime().targetAllocator() : nullptr,
      resizable);
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::computeDispatchKey(std::nullopt, at::kStrided, device)), dtype);
  impl->remove_autograd_key();
  return impl;
}

at::Tensor targetOver(const at::Tensor& accel, bool resizable) {
  TORCH_INTERNAL_ASSERT(accel.device().type() == c10::DeviceType::PrivateUse1);
  const c10::Storage& storage = accel.storage();
  auto impl =
      targetImpl(const_cast<void*>(storage.data()), storage.nbytes(), accel.device().index(), accel.dtype(), resizable);
  impl->set_sizes_and_strides(accel.sizes(), accel.strides(), accel.storage_offset());
  // Kernels that handle lazy conjugation/negation themselves see the bits.
  impl->_set_conj(accel.is_conj());
  impl->_set_neg(accel.is_neg());
  return at::Tensor(std::move(impl));
}

} // namespace

at::Tensor toTarget(const at::Tensor& accel) {
  return targetOver(accel, /*resizable=*/false);
}

at::Tensor toResizableTarget(const at::Tensor& accel) {
  return targetOver(accel, /*resizable=*/true);
}

at::Tensor toTargetIfAccel(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == c10::DeviceType::PrivateUse1 ? toTarget(tensor) : tensor;
}

at::Tensor targetBytes(void* data, size_t nbytes, c10::DeviceIndex device) {
  auto impl = targetImpl(data, nbytes, device, caffe2::TypeMeta::Make<uint8_t>());
  impl->set_sizes_contiguous({static_cast<int64_t>(nbytes)});
  return at::Tensor(std::move(impl));
}

} // namespace torch_accel
