#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>

namespace torch_accel {

// Grows or shrinks an accel storage to `nbytes`, keeping the leading bytes.
// The copy runs on the current accel stream, as CUDA's storage resize does.
void resizeStorageBytes(c10::StorageImpl* storage, size_t nbytes);

} // namespace torch_accel

namespace torch_accel {

// Grows `tensor`'s storage when its sizes, strides and offset reach past the
// end (as CPU's and CUDA's resize_ do); never shrinks it. In deterministic
// mode (torch.use_deterministic_algorithms with
// torch.utils.deterministic.fill_uninitialized_memory) the new bytes are
// filled with NaN or the dtype's maximum, as CUDA's resize_ fills them.
void ensureStorageFits(const at::Tensor& tensor);

} // namespace torch_accel
