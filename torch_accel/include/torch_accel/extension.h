#pragma once

// torch_accel's public header for users' own kernels (C++ or CUDA extensions).
//
// It gives an extension what a CUDA extension gets from c10/cuda, for accel
// devices: the device type, a device guard, the current accel stream (as a
// cudaStream_t on the CUDA runtime), the accel allocator, and the dispatch
// key under which an operator is registered for accel. Everything here is
// reached through c10's device-generic interfaces, which torch_accel
// implements for PrivateUse1 (the device guard, stream and allocator
// registries), so an extension neither links against torch_accel nor sees its
// runtime: the header stays valid whichever runtime runs and however that
// runtime changes. See docs/extensions.md.
//
// The memory of an accel tensor is the runtime's: CUDA device memory on the
// CUDA runtime (launch CUDA kernels on getCurrentCUDAStream()), host memory
// on the host runtime (read and write it from the calling thread; the host
// runtime's streams complete every operation before it returns).

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/DeviceType.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#if defined(TORCH_ACCEL_EXTENSION_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace accel {

// The accel device type: PyTorch's PrivateUse1, which torch_accel registers
// under the name "accel".
constexpr c10::DeviceType kAccel = c10::DeviceType::PrivateUse1;

inline bool isAccel(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == kAccel;
}

// Raises a ValueError naming `what` unless `tensor` is an accel tensor.
inline void checkAccel(const at::Tensor& tensor, const char* what) {
  TORCH_CHECK_VALUE(
      isAccel(tensor),
      what,
      " must be an accel tensor, got ",
      tensor.defined() ? tensor.device().str() : std::string("an undefined tensor"));
}

// The accel device index current on this thread.
inline c10::DeviceIndex currentDevice() {
  return c10::impl::getDeviceGuardImpl(kAccel)->getDevice().index();
}

// Makes accel:`index` the current accel device for its scope and restores
// the previous one at its end, as c10::cuda::CUDAGuard does for cuda.
class DeviceGuard {
public:
  explicit DeviceGuard(c10::DeviceIndex index) : guard_(c10::Device(kAccel, index)) {}
  // The device of `tensor`, an accel tensor.
  explicit DeviceGuard(const at::Tensor& tensor) : guard_(deviceOf(tensor)) {}

  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
  static c10::Device deviceOf(const at::Tensor& tensor) {
    checkAccel(tensor, "accel::DeviceGuard's tensor");
    return tensor.device();
  }

  c10::DeviceGuard guard_;
};

// The current accel stream of accel:`index` (-1: the current device). Work
// that an operator does for accel tensors runs on it, as PyTorch's CUDA
// kernels run on the current CUDA stream.
inline c10::Stream getCurrentStream(c10::DeviceIndex index = -1) {
  const auto* impl = c10::impl::getDeviceGuardImpl(kAccel);
  return impl->getStream(c10::Device(kAccel, index < 0 ? impl->getDevice().index() : index));
}

// The runtime's handle of `stream`: a cudaStream_t on the CUDA runtime, an
// accelrt stream on the host runtime (null: the default stream).
inline void* nativeHandle(const c10::Stream& stream) {
  TORCH_CHECK_VALUE(stream.device_type() == kAccel, "accel::nativeHandle expects an accel stream, got ", stream);
  return c10::impl::getDeviceGuardImpl(kAccel)->getStreamNativeHandle(stream);
}

#if defined(TORCH_ACCEL_EXTENSION_CUDA)
// The CUDA stream behind the current accel stream of accel:`index` (CUDA
// runtime only): launch kernels for accel tensors on it.
inline cudaStream_t getCurrentCUDAStream(c10::DeviceIndex index = -1) {
  return static_cast<cudaStream_t>(nativeHandle(getCurrentStream(index)));
}
#endif

// The allocator of accel memory on the current accel device (what
// at::empty(..., device=accel) uses): its DataPtrs free themselves, and the
// memory statistics and pools of torch.accel.memory count them.
inline c10::Allocator* allocator() {
  return c10::GetAllocator(kAccel);
}

} // namespace accel

// Registers kernels of the operators of namespace `ns` for accel tensors:
//   TORCH_ACCEL_LIBRARY_IMPL(my_ops, m) { m.impl("scale_add", &scale_add_accel); }
// An operator without an accel kernel runs its target's kernel (CUDA's on
// the CUDA runtime, the CPU's on the host runtime) through torch_accel's
// fallback, on the same memory and the current accel stream.
#define TORCH_ACCEL_LIBRARY_IMPL(ns, m) TORCH_LIBRARY_IMPL(ns, PrivateUse1, m)
