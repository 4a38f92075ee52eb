#pragma once

// Nested tensors of the strided layout (NestedTensorImpl) on both sides of
// the alias fallback. (Jagged nested tensors are Python subclasses over
// strided tensors, which accel runs as any other.)
//
// A nested accel tensor (dispatch key NestedTensorPrivateUse1) is one accel
// storage, its buffer, with the nested sizes, strides and offsets that cut it
// into tensors (CPU tensors on every device). Its target view is a nested
// tensor of the target's key over the target view of its buffer, with the
// same metadata; a nested target result maps back through its buffer, which
// is then a view of an argument's storage or fresh memory to adopt.

#include <ATen/core/Tensor.h>

namespace torch_accel {

// The whole storage of the nested tensor `nested` as a 1-D strided tensor of
// its device (a view, sharing its keys' autograd state).
at::Tensor bufferOf(const at::Tensor& nested);

// A nested tensor over `buffer` (a 1-D strided tensor made by bufferOf, of any
// device) with the nested sizes, strides and offsets of `like`.
at::Tensor nestedOver(const at::Tensor& buffer, const at::Tensor& like);

} // namespace torch_accel
