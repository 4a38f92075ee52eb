#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torch_accel {

// Adds fault injection to torch_accel._C (docs/fault-injection.md;
// torch_accel/_fault_injection.py builds on it).
void initFaultInjectionBindings(pybind11::module& m);

} // namespace torch_accel
