#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torch_accel {

// Adds to torch_accel._C what accel's exchange with other array libraries
// (DLPack, __cuda_array_interface__; torch_accel/_interop.py) needs: the
// target tensor that stands for an accel tensor's memory when it leaves
// PyTorch (docs/interop.md).
void initInteropBindings(pybind11::module& m);

} // namespace torch_accel
