// resize_: new sizes (contiguous, or in the requested memory format); the
// storage grows when the new shape needs more bytes and never shrinks, as on
// CPU and CUDA (in deterministic mode, with the new bytes filled as CUDA
// fills them: see ensureStorageFits).

#include <csrc/aten/StorageResize.h>

#include <ATen/core/Tensor.h>
#include <torch/library.h>

namespace torch_accel {
namespace {

const at::Tensor& resize(const at::Tensor& self, at::IntArrayRef size, std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!self.has_names(), "resize_ is not allowed on a tensor with named dimensions");
  for (const auto dim : size) {
    TORCH_CHECK(dim >= 0, "Trying to create an accel tensor with negative dimension ", dim, ": ", size);
  }
  auto* impl = self.unsafeGetTensorImpl();
  if (impl->sizes() != size || memory_format.has_value()) {
    impl->set_sizes_contiguous(size);
    if (memory_format.has_value()) {
      TORCH_CHECK(
          *memory_format != at::MemoryFormat::Preserve, "Unsupported memory format for resize_: ", *memory_format);
      impl->empty_tensor_restride(*memory_format);
    }
  }
  ensureStorageFits(self);
  return self;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("resize_", TORCH_FN(resize));
}

} // namespace
} // namespace torch_accel
