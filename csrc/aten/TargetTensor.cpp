#include <csrc/aten/TargetTensor.h>
#include <csrc/runtime/Runtime.h>

#include <c10/core/TensorImpl.h>

namespace torch_accel {
namespace {

c10::intrusive_ptr<c10::TensorImpl>
targetImpl(c10::DataPtr data, size_t nbytes, caffe2::TypeMeta dtype, bool resizable = false) {
  c10::Storage storage(
      c10::Storage::use_byte_size_t(),
      nbytes,
      std::move(data),
      resizable ? runtime().targetAllocator() : nullptr,
      resizable);
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(targetDispatchKey()), dtype);
  impl->remove_autograd_key();
  return impl;
}

// The DataPtr of a target tensor that owns nothing.
c10::DataPtr borrowedData(void* data, c10::DeviceIndex device) {
  return c10::DataPtr(data, targetDevice(device));
}

void releaseStorage(void* storage) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(storage));
}

// The DataPtr of a target tensor that holds a reference to `storage`.
c10::DataPtr retainingData(const c10::Storage& storage, c10::DeviceIndex device) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  c10::raw::intrusive_ptr::incref(impl);
  return c10::DataPtr(const_cast<void*>(storage.data()), impl, &releaseStorage, targetDevice(device));
}

at::Tensor targetOver(const at::Tensor& accel, bool resizable, bool keep_alive) {
  TORCH_INTERNAL_ASSERT(accel.device().type() == c10::DeviceType::PrivateUse1);
  const c10::Storage& storage = accel.storage();
  const c10::DeviceIndex device = accel.device().index();
  auto data = keep_alive ? retainingData(storage, device) : borrowedData(const_cast<void*>(storage.data()), device);
  auto impl = targetImpl(std::move(data), storage.nbytes(), accel.dtype(), resizable);
  impl->set_sizes_and_strides(accel.sizes(), accel.strides(), accel.storage_offset());
  // Kernels that handle lazy conjugation/negation themselves see the bits.
  impl->_set_conj(accel.is_conj());
  impl->_set_neg(accel.is_neg());
  return at::Tensor(std::move(impl));
}

} // namespace

at::Tensor toTarget(const at::Tensor& accel) {
  return targetOver(accel, /*resizable=*/false, /*keep_alive=*/false);
}

at::Tensor toResizableTarget(const at::Tensor& accel) {
  return targetOver(accel, /*resizable=*/true, /*keep_alive=*/false);
}

at::Tensor toTargetKeepingAlive(const at::Tensor& accel) {
  return targetOver(accel, /*resizable=*/false, /*keep_alive=*/true);
}

at::Tensor toTargetIfAccel(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == c10::DeviceType::PrivateUse1 ? toTarget(tensor) : tensor;
}

c10::DispatchKey targetDispatchKey() {
  static const c10::DispatchKey key = c10::computeDispatchKey(std::nullopt, at::kStrided, targetDevice(0));
  return key;
}

at::Tensor targetBytes(void* data, size_t nbytes, c10::DeviceIndex device) {
  auto impl = targetImpl(borrowedData(data, device), nbytes, caffe2::TypeMeta::Make<uint8_t>());
  impl->set_sizes_contiguous({static_cast<int64_t>(nbytes)});
  return at::Tensor(std::move(impl));
}

} // namespace torch_accel
