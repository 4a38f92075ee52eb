#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torch_accel {

// Adds to torch_accel._C what tests need to see the target views the alias
// fallback hands to target kernels: _target_view_state describes every
// property a kernel can observe of the view that stands for an accel tensor,
// from a recycled TensorImpl or a new one (see RecycledViews in
// csrc/aten/TargetTensor.cpp).
void initTargetViewBindings(pybind11::module& m);

} // namespace torch_accel
