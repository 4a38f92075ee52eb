// set_: point an accel tensor at (part of) an accel storage, or at a fresh
// empty one.

#include <csrc/aten/StorageResize.h>
#include <csrc/core/AccelDevice.h>

#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace torch_accel {
namespace {

// ATen's set_storage_cpu_ / set_storage_cuda_: checkSetStorage, the offset,
// then resize_impl, which returns early when the sizes are unchanged and no
// strides are given or they are unchanged too: the tensor then keeps its
// strides (an expanded tensor stays expanded) and its storage is not grown.
at::Tensor& set_storage_offset(
    at::Tensor& self, at::Storage source, int64_t storage_offset, at::IntArrayRef size, at::IntArrayRef stride) {
  at::native::checkSetStorage(self, std::move(source), storage_offset, size, stride);
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_offset(storage_offset);
  const bool with_strides = stride.data() != nullptr;
  if (impl->sizes() == size && (!with_strides || impl->strides() == stride)) {
    return self;
  }
  if (with_strides) {
    impl->set_sizes_and_strides(size, stride);
  } else {
    impl->set_sizes_contiguous(size);
  }
  // A storage too small for the new shape grows, its new bytes filled in
  // deterministic mode (see ensureStorageFits and docs/alias-fallback.md#deterministic-mode).
  ensureStorageFits(self);
  return self;
}

// ATen's set_(Storage): as many whole elements as the storage holds (a
// trailing partial element is left out, as on cpu and cuda).
at::Tensor& set_storage(at::Tensor& self, at::Storage source) {
  const int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage_offset(self, std::move(source), 0, {numel}, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.unsafeGetTensorImpl() != source.unsafeGetTensorImpl()) {
    return set_storage_offset(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
  }
  return self;
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device()); // the empty storage belongs to self's device
  auto* allocator = c10::GetAllocator(kAccel);
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, allocator->allocate(0), allocator, /*resizable=*/true);
  return set_storage_offset(self, std::move(empty), 0, {0}, {});
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
}

} // namespace
} // namespace torch_accel
