#pragma once

// The accel device type and its predicates: PyTorch's PrivateUse1 device
// type, which torch_accel registers under the name "accel". Every floor of
// csrc/ includes this header rather than naming PrivateUse1 itself, so that
// "is this an accel tensor" has one answer.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>

namespace torch_accel {

constexpr c10::DeviceType kAccel = c10::DeviceType::PrivateUse1;

inline bool isAccel(c10::Device device) noexcept {
  return device.type() == kAccel;
}

// An undefined tensor is no accel tensor (optional arguments).
inline bool isAccel(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == kAccel;
}

} // namespace torch_accel
