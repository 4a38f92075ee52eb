#include <csrc/aten/StorageResize.h>
#include <csrc/aten/TargetTensor.h>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/ResizeCommon.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>

namespace torch_accel {

void resizeStorageBytes(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize an accel storage that is not resizable");
  TORCH_CHECK(storage->allocator() != nullptr, "Trying to resize an accel storage that has no allocator");
  const c10::Device device = storage->device();
  c10::DeviceGuard guard(device);
  c10::DataPtr data = storage->allocator()->allocate(nbytes);
  const size_t keep = std::min(nbytes, storage->nbytes());
  if (keep > 0) {
    // Copied by the target's kernel, so it is ordered on the current stream
    // like all other work on this memory.
    targetBytes(data.get(), keep, device.index()).copy_(targetBytes(storage->mutable_data(), keep, device.index()));
  }
  storage->set_data_ptr_noswap(std::move(data));
  storage->set_nbytes(nbytes);
}

void ensureStorageFits(const at::Tensor& tensor) {
  c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  if (impl->numel() == 0) {
    return;
  }
  const size_t needed = at::detail::computeStorageNbytes(
      impl->sizes(), impl->strides(), impl->dtype().itemsize(), impl->storage_offset());
  c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
  const size_t old_nbytes = storage->nbytes();
  if (needed <= old_nbytes) {
    return;
  }
  resizeStorageBytes(storage, needed);
  if (C10_UNLIKELY(
          at::globalContext().deterministicAlgorithms() &&
          at::globalContext().deterministicFillUninitializedMemory())) {
    at::native::fill_resize_deterministic_(tensor, static_cast<int64_t>(old_nbytes));
  }
}

} // namespace torch_accel
