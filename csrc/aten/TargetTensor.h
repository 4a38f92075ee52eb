#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/FunctionRef.h>

namespace torch_accel {

// Maps a tensor to the one standing for it on the other side of the fallback
// (an accel tensor to its target view, a target result to its accel tensor).
// Tensor kinds built from tensors (sparse tensors' indices and values,
// per-channel quantizers' scales) map their parts with one.
using MapTensor = c10::function_ref<at::Tensor(const at::Tensor&)>;

// A new tensor of the target device type (cuda or cpu) over the same memory as
// the accel tensor `accel`: same storage bytes, sizes, strides, offset, dtype
// and conjugate/negative bits, no autograd keys. It does not own the memory:
// it must not outlive `accel`'s storage. `accel` itself is never modified, so
// its views stay accel tensors.
at::Tensor toTarget(const at::Tensor& accel);

// toTarget for an argument a kernel may resize (out=, in-place): its storage
// can grow, with the target's allocator, unless `accel`'s storage is not
// resizable. The caller moves any new memory and metadata back to `accel`
// afterwards.
at::Tensor toResizableTarget(const at::Tensor& accel);

// toResizableTarget for a caller that makes several views and reads
// `inference_mode` (inferenceModeEnabled(), which a recycled view must
// match) once for all of them.
at::Tensor toResizableTarget(const at::Tensor& accel, bool inference_mode);

// c10::InferenceMode::is_enabled(), read the cheapest way.
bool inferenceModeEnabled();

// toResizableTarget with a new TensorImpl, never a recycled one (see
// recycleTarget): what a recycled view must be indistinguishable from, which
// tests compare it with.
at::Tensor toNewResizableTarget(const at::Tensor& accel);

// Whether a recycled view waits on this thread for the next toTarget.
bool hasRecycledTarget();

// toResizableTarget for an accel tensor whose storage an existing target view
// already stands for: `same_storage`, made (by the same call) for an accel
// tensor with the same accel storage. The new view shares its storage, so
// that two accel views of one buffer are two target views of one buffer:
// ATen's overlap checks and same-data shortcuts (Storage::is_alias_of) then
// see what they would see on the target, and a kernel that resizes one sees
// the other follow.
at::Tensor toTargetSharingStorage(const at::Tensor& accel, const at::Tensor& same_storage);

// toTarget whose storage keeps `accel`'s storage alive, for target tensors
// that code may hold after the call returns: a c10d engine keeps a
// collective's tensors until its work completes, and the caller may drop the
// accel tensor before that.
at::Tensor toTargetKeepingAlive(const at::Tensor& accel);

// Hands back a target tensor made by toTarget or toResizableTarget once its
// caller is done with it. If nothing else holds it, a later toTarget on this
// thread reuses its TensorImpl and storage instead of allocating new ones
// (operators make target views on every call); otherwise it is dropped.
// `written_to`: it stood for an argument a kernel wrote to (out=, in-place),
// whose metadata the kernel may have changed.
void recycleTarget(at::Tensor&& target, bool written_to = false);

// toTarget for accel tensors; any other tensor is returned as it is.
at::Tensor toTargetIfAccel(const at::Tensor& tensor);

// The backend dispatch key of target tensors (CPU or CUDA): the key whose
// kernels run accel's work. Fixed for the process, as the target type is.
c10::DispatchKey targetDispatchKey();

// The target's dispatch key for tensors of another kind: `functionality`
// (Quantized, Sparse, SparseCsr) of the target's backend (QuantizedCPU,
// SparseCUDA, ...).
c10::DispatchKey targetDispatchKey(c10::DispatchKey functionality);

// A 1-D uint8 target tensor over `nbytes` of accel:`device` memory at `data`.
at::Tensor targetBytes(void* data, size_t nbytes, c10::DeviceIndex device);

} // namespace torch_accel
