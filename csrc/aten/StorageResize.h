#pragma once

#include <c10/core/StorageImpl.h>

namespace torch_accel {

// Grows or shrinks an accel storage to `nbytes`, keeping the leading bytes.
// The copy runs on the current accel stream, as CUDA's storage resize does.
void resizeStorageBytes(c10::StorageImpl* storage, size_t nbytes);

} // namespace torch_accel

namespace c10 {
struct TensorImpl;
}

namespace torch_accel {

// Grows `tensor`'s storage when its sizes, strides and offset reach past the
// end (as CPU's and CUDA's resize_ do); never shrinks it.
void ensureStorageFits(c10::TensorImpl* tensor);

} // namespace torch_accel
