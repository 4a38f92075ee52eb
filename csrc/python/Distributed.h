#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torch_accel {

// Adds the c10d backend's entry points to torch_accel._C. Only in builds
// against a torch with torch.distributed (TORCH_ACCEL_WITH_DISTRIBUTED).
void initDistributedBindings(pybind11::module& m);

} // namespace torch_accel
