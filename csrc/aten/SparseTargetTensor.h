#pragma once

// Sparse tensors on both sides of the alias fallback.
//
// A sparse accel tensor owns no memory: it is built from accel strided
// tensors, its parts. A COO tensor (SparseTensorImpl, dispatch key
// SparsePrivateUse1) has indices and values; a compressed one (CSR, CSC, BSR,
// BSC: SparseCsrTensorImpl, SparseCsrPrivateUse1) has compressed indices,
// plain indices and values. Its target view is a sparse tensor of the
// target's key (SparseCPU, SparseCsrCUDA, ...) with the same layout, sizes,
// dimensions and coalesced flag over the target views of its parts; a sparse
// target result maps back part by part, so a part that is an argument's part
// stays that accel tensor, and fresh parts are adopted as any result is.

#include <csrc/aten/TargetTensor.h>

#include <ATen/core/Tensor.h>

namespace torch_accel {

// Whether `tensor` has a sparse layout (COO or compressed): a test of its
// dispatch keys, inline, as every operator call asks it of every tensor.
inline bool isSparse(const at::Tensor& tensor) {
  return tensor.key_set().has_any(c10::sparse_ks | c10::sparse_csr_ks);
}

// Calls `fn` with each part of the sparse tensor `sparse`.
void forEachPart(const at::Tensor& sparse, c10::function_ref<void(const at::Tensor&)> fn);

// The target sparse tensor standing for the sparse accel tensor `accel`, its
// parts mapped by `map` (to their target views).
at::Tensor sparseTarget(const at::Tensor& accel, MapTensor map);

// The sparse accel tensor (on accel:`device`) for the sparse target result
// `target`, its parts mapped by `map` (to accel tensors).
at::Tensor sparseAccel(const at::Tensor& target, c10::DeviceIndex device, MapTensor map);

// After a target kernel changed `target`, the target view of the sparse
// accel tensor `accel` (an in-place or out= argument): `accel` takes its
// sizes, dimensions, layout, flag and parts (mapped by `map`).
void syncSparse(const at::Tensor& accel, const at::Tensor& target, MapTensor map);

} // namespace torch_accel
