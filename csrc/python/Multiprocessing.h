#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torch_accel {

// Adds the entry points torch_accel.multiprocessing's storage reductions use
// to torch_accel._C: sharing an accel storage's memory and mapping memory
// another process shared.
void initMultiprocessingBindings(pybind11::module& m);

} // namespace torch_accel
