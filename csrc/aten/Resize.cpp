// resize_: new sizes (contiguous, or in the requested memory format); the
// storage grows when the new shape needs more bytes and never shrinks, as on
// CPU and CUDA (in deterministic mode, with the new bytes filled as CUDA
// fills them: see ensureStorageFits).

#include <csrc/aten/StorageResize.h>

#include <ATen/core/DimVector.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

namespace torch_accel {
namespace {

const at::Tensor& resize(const at::Tensor& self, at::IntArrayRef size, std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!self.has_names(), "resize_ is not allowed on a tensor with named dimensions");
  for (const auto dim : size) {
    TORCH_CHECK(dim >= 0, "Trying to create an accel tensor with negative dimension ", dim, ": ", size);
  }
  TORCH_CHECK(
      memory_format != at::MemoryFormat::Preserve,
      "Unsupported memory format for resize_: ",
      at::MemoryFormat::Preserve);
  auto* impl = self.unsafeGetTensorImpl();
  if (impl->sizes() == size && !memory_format.has_value()) {
    ensureStorageFits(self);
    return self;
  }
  // The new sizes go in first (the storage's size follows from them), and
  // back out if the storage cannot grow: ATen's resize leaves a tensor whose
  // sizes its storage cannot hold after an out-of-memory error, and reading
  // it reads past its memory (docs/fault-injection.md).
  const c10::DimVector old_sizes(impl->sizes());
  const c10::DimVector old_strides(impl->strides());
  impl->set_sizes_contiguous(size);
  if (memory_format.has_value()) {
    impl->empty_tensor_restride(*memory_format);
  }
  try {
    ensureStorageFits(self);
  } catch (...) {
    impl->set_sizes_and_strides(old_sizes, old_strides);
    throw;
  }
  return self;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("resize_", TORCH_FN(resize));
}

} // namespace
} // namespace torch_accel
