// Factory kernels: every accel tensor's memory is born here (and the
// memoryless zero tensors autograd uses for gradients known to be zero).

#include <csrc/aten/Empty.h>
#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/Runtime.h>

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/TensorFactories.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace torch_accel {
namespace {

// With torch.use_deterministic_algorithms(True) and
// torch.utils.deterministic.fill_uninitialized_memory (the default), a new
// tensor reads NaN (floating and complex) or its dtype's maximum (integers,
// bool True), as CUDA's and CPU's empty kernels make it.
at::Tensor filledIfDeterministic(at::Tensor tensor) {
  if (C10_UNLIKELY(
          at::globalContext().deterministicAlgorithms() &&
          at::globalContext().deterministicFillUninitializedMemory())) {
    at::native::fill_empty_deterministic_(tensor);
  }
  return tensor;
}

// Checks what every accel factory needs and makes `device` current for the
// allocation (a factory without an index allocates on the current device).
c10::Device
prepareFactory(std::optional<at::Device> device, std::optional<at::Layout> layout, std::optional<bool> pin_memory) {
  const c10::Device target = device.value_or(c10::Device(kAccel));
  TORCH_INTERNAL_ASSERT(target.type() == kAccel);
  TORCH_CHECK(
      layout.value_or(at::kStrided) == at::kStrided,
      "accel tensors must be strided, but layout ",
      *layout,
      " was requested");
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned, not accel tensors");
  at::globalContext().lazyInitDevice(kAccel);
  return target;
}

at::Tensor allocateEmpty(
    at::IntArrayRef size,
    std::optional<at::ScalarType> dtype,
    std::optional<at::Layout> layout,
    std::optional<at::Device> device,
    std::optional<bool> pin_memory,
    std::optional<at::MemoryFormat> memory_format) {
  const c10::Device target = prepareFactory(device, layout, pin_memory);
  c10::DeviceGuard guard(target);
  return at::detail::empty_generic(
      size,
      c10::GetAllocator(kAccel),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::dtype_or_default(dtype),
      memory_format);
}

at::Tensor allocateEmptyStrided(
    at::IntArrayRef size,
    at::IntArrayRef stride,
    std::optional<at::ScalarType> dtype,
    std::optional<at::Layout> layout,
    std::optional<at::Device> device,
    std::optional<bool> pin_memory) {
  const c10::Device target = prepareFactory(device, layout, pin_memory);
  c10::DeviceGuard guard(target);
  return at::detail::empty_strided_generic(
      size,
      stride,
      c10::GetAllocator(kAccel),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::dtype_or_default(dtype));
}

at::Tensor empty_memory_format(
    at::IntArrayRef size,
    std::optional<at::ScalarType> dtype,
    std::optional<at::Layout> layout,
    std::optional<at::Device> device,
    std::optional<bool> pin_memory,
    std::optional<at::MemoryFormat> memory_format) {
  return filledIfDeterministic(allocateEmpty(size, dtype, layout, device, pin_memory, memory_format));
}

at::Tensor empty_strided(
    at::IntArrayRef size,
    at::IntArrayRef stride,
    std::optional<at::ScalarType> dtype,
    std::optional<at::Layout> layout,
    std::optional<at::Device> device,
    std::optional<bool> pin_memory) {
  return filledIfDeterministic(allocateEmptyStrided(size, stride, dtype, layout, device, pin_memory));
}

// A tensor that reads as zeros everywhere and owns no memory (ZeroTensor key:
// autograd's stand-in for a gradient known to be zero, e.g. sgn's). As the
// target's own kernel does for target tensors; the target's kernel cannot
// stand in, since its result has no memory an accel tensor could adopt.
at::Tensor efficient_zero_tensor(
    at::IntArrayRef size,
    std::optional<at::ScalarType> dtype,
    std::optional<at::Layout> layout,
    std::optional<at::Device> device,
    std::optional<bool> pin_memory) {
  const c10::Device target = prepareFactory(device, layout, pin_memory);
  c10::DeviceGuard guard(target);
  at::native::ZeroTensorAllocator allocator(c10::Device(kAccel, guard.current_device().index()));
  return at::detail::empty_generic(
      size,
      &allocator,
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1) | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor),
      c10::dtype_or_default(dtype),
      std::nullopt);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("_efficientzerotensor", TORCH_FN(efficient_zero_tensor));
}

} // namespace

at::Tensor emptyStrided(at::IntArrayRef size, at::IntArrayRef stride, at::ScalarType dtype, c10::DeviceIndex device) {
  checkDeviceIndex(device);
  // Never filled, like torch._C._dynamo.guards._empty_strided_cuda: the
  // generated code writes every buffer before reading it.
  return allocateEmptyStrided(size, stride, dtype, std::nullopt, c10::Device(kAccel, device), std::nullopt);
}

} // namespace torch_accel
