#include <csrc/aten/SparseTargetTensor.h>
#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/Runtime.h>

#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseTensorImpl.h>
#include <c10/core/DeviceGuard.h>

namespace torch_accel {
namespace {

at::SparseTensorImpl* cooImpl(const at::Tensor& tensor) {
  return static_cast<at::SparseTensorImpl*>(tensor.unsafeGetTensorImpl());
}

at::SparseCsrTensorImpl* compressedImpl(const at::Tensor& tensor) {
  return static_cast<at::SparseCsrTensorImpl*>(tensor.unsafeGetTensorImpl());
}

// A COO tensor of `key` on `device` with `like`'s sizes, dimensions and flag
// (`like`: its counterpart on the other side) over `indices` and `values`.
at::Tensor cooTensor(
    c10::DispatchKey key,
    c10::Device device,
    const at::Tensor& like,
    const at::Tensor& indices,
    const at::Tensor& values,
    bool autograd) {
  // The constructor gives the tensor placeholder parts on the current device,
  // and the device of the tensor is theirs.
  c10::DeviceGuard guard(device);
  auto impl = c10::make_intrusive<at::SparseTensorImpl>(c10::DispatchKeySet(key), like.dtype());
  if (!autograd) {
    impl->remove_autograd_key();
  }
  const at::SparseTensorImpl* like_impl = cooImpl(like);
  impl->raw_resize_(like_impl->sparse_dim(), like_impl->dense_dim(), like.sizes());
  impl->set_indices_and_values_unsafe(indices, values);
  impl->set_coalesced(like_impl->coalesced());
  return at::Tensor(std::move(impl));
}

// A compressed tensor of `key` on `device` with `like`'s layout and sizes.
at::Tensor compressedTensor(
    c10::DispatchKey key,
    c10::Device device,
    const at::Tensor& like,
    const at::Tensor& compressed_indices,
    const at::Tensor& plain_indices,
    const at::Tensor& values,
    bool autograd) {
  auto impl =
      c10::make_intrusive<at::SparseCsrTensorImpl>(c10::DispatchKeySet(key), device, like.layout(), like.dtype());
  if (!autograd) {
    impl->remove_autograd_key();
  }
  impl->set_member_tensors(compressed_indices, plain_indices, values, like.sizes());
  return at::Tensor(std::move(impl));
}

} // namespace

void forEachPart(const at::Tensor& sparse, c10::function_ref<void(const at::Tensor&)> fn) {
  if (sparse.layout() == at::kSparse) {
    const at::SparseTensorImpl* impl = cooImpl(sparse);
    fn(impl->indices());
    fn(impl->values());
  } else {
    const at::SparseCsrTensorImpl* impl = compressedImpl(sparse);
    fn(impl->compressed_indices());
    fn(impl->plain_indices());
    fn(impl->values());
  }
}

at::Tensor sparseTarget(const at::Tensor& accel, MapTensor map) {
  TORCH_INTERNAL_ASSERT(accel.device().type() == kAccel);
  const c10::Device device = targetDevice(accel.device().index());
  at::Tensor target;
  if (accel.layout() == at::kSparse) {
    const at::SparseTensorImpl* impl = cooImpl(accel);
    target = cooTensor(
        targetDispatchKey(c10::DispatchKey::Sparse),
        device,
        accel,
        map(impl->indices()),
        map(impl->values()),
        /*autograd=*/false);
  } else {
    const at::SparseCsrTensorImpl* impl = compressedImpl(accel);
    target = compressedTensor(
        targetDispatchKey(c10::DispatchKey::SparseCsr),
        device,
        accel,
        map(impl->compressed_indices()),
        map(impl->plain_indices()),
        map(impl->values()),
        /*autograd=*/false);
  }
  // Kernels refuse to change the metadata of a tensor made by .data or
  // detach(); so must the view of one.
  target.unsafeGetTensorImpl()->set_allow_tensor_metadata_change(
      accel.unsafeGetTensorImpl()->allow_tensor_metadata_change());
  return target;
}

at::Tensor sparseAccel(const at::Tensor& target, c10::DeviceIndex device, MapTensor map) {
  const c10::Device accel_device(kAccel, device);
  if (target.layout() == at::kSparse) {
    const at::SparseTensorImpl* impl = cooImpl(target);
    return cooTensor(
        c10::DispatchKey::SparsePrivateUse1,
        accel_device,
        target,
        map(impl->indices()),
        map(impl->values()),
        /*autograd=*/true);
  }
  const at::SparseCsrTensorImpl* impl = compressedImpl(target);
  return compressedTensor(
      c10::DispatchKey::SparseCsrPrivateUse1,
      accel_device,
      target,
      map(impl->compressed_indices()),
      map(impl->plain_indices()),
      map(impl->values()),
      /*autograd=*/true);
}

void syncSparse(const at::Tensor& accel, const at::Tensor& target, MapTensor map) {
  if (target.layout() == at::kSparse) {
    at::SparseTensorImpl* accel_impl = cooImpl(accel);
    const at::SparseTensorImpl* target_impl = cooImpl(target);
    at::Tensor indices = map(target_impl->indices());
    at::Tensor values = map(target_impl->values());
    // Only what changed: an unchanged tensor made by detach() stays valid.
    if (accel_impl->sparse_dim() != target_impl->sparse_dim() || accel_impl->dense_dim() != target_impl->dense_dim() ||
        accel.sizes() != target.sizes() || !accel_impl->indices().is_same(indices) ||
        !accel_impl->values().is_same(values)) {
      accel_impl->raw_resize_(target_impl->sparse_dim(), target_impl->dense_dim(), target.sizes());
      accel_impl->set_indices_and_values_unsafe(indices, values);
    }
    if (accel_impl->coalesced() != target_impl->coalesced()) {
      accel_impl->set_coalesced(target_impl->coalesced());
    }
    return;
  }
  at::SparseCsrTensorImpl* accel_impl = compressedImpl(accel);
  const at::SparseCsrTensorImpl* target_impl = compressedImpl(target);
  at::Tensor compressed_indices = map(target_impl->compressed_indices());
  at::Tensor plain_indices = map(target_impl->plain_indices());
  at::Tensor values = map(target_impl->values());
  if (accel.layout() != target.layout()) {
    accel_impl->set_layout(target.layout());
  }
  if (accel.sizes() != target.sizes() || !accel_impl->compressed_indices().is_same(compressed_indices) ||
      !accel_impl->plain_indices().is_same(plain_indices) || !accel_impl->values().is_same(values)) {
    accel_impl->set_member_tensors(compressed_indices, plain_indices, values, target.sizes());
  }
}

} // namespace torch_accel
