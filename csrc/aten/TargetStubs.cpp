// DispatchStubs that CompositeImplicitAutograd kernels call by the device
// type of accel tensors: their PrivateUse1 kernel runs the target's over
// target views. (Stubs reached from CompositeExplicitAutograd kernels are
// avoided instead: the fallback runs those composites on target tensors, see
// runsOnTargetComposite in AliasFallback.cpp; a composite that decomposes
// above autograd must keep running on accel tensors, so its stubs need
// accel kernels. The list is in docs/alias-fallback.md, "DispatchStubs".)

#include <csrc/aten/TargetTensor.h>

#include <ATen/core/Tensor.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/SparseTensorUtils.h>
#include <c10/core/DeviceGuard.h>

namespace at::native {

// Declared in ATen/native/sparse/SparseStubs.h, a header torch does not
// install (PyTorch 2.11's declaration; test_fallback's sparse_coo_tensor
// tests run the kernel registered below through it).
using flatten_indices_fn = Tensor (*)(const Tensor& indices, IntArrayRef size);
DECLARE_DISPATCH(flatten_indices_fn, flatten_indices_stub)

} // namespace at::native

namespace torch_accel {
namespace {

// The stub of at::sparse::flatten_indices, which sparse_coo_tensor and
// _validate_sparse_coo_tensor_args call to check indices said to be
// coalesced: flatten_indices over a target view (so the target's stub
// kernel), its result copied to the indices' accel device. (Extensions do
// not call stubs themselves: their inline dispatch code depends on CPU
// capability macros of PyTorch's own build.)
at::Tensor flattenIndices(const at::Tensor& indices, at::IntArrayRef size) {
  c10::DeviceGuard guard(indices.device());
  at::Tensor target = toTarget(indices);
  at::Tensor flat = at::sparse::flatten_indices(target, size);
  recycleTarget(std::move(target));
  return flat.to(indices.device());
}

} // namespace
} // namespace torch_accel

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(flatten_indices_stub, &torch_accel::flattenIndices)
} // namespace at::native
