#pragma once

#include <ATen/core/Tensor.h>

namespace torch_accel {

// What aten::empty_strided gives for accel:`device`, without the dispatcher:
// for Inductor's generated code, which allocates every buffer it needs
// (torch_accel._C._empty_strided, see torch_accel/_inductor/codegen.py). Like cuda's
// fast allocation for generated code, it is never filled in deterministic mode.
at::Tensor emptyStrided(at::IntArrayRef size, at::IntArrayRef stride, at::ScalarType dtype, c10::DeviceIndex device);

} // namespace torch_accel
