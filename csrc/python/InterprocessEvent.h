#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torch_accel {

// Adds torch_accel._C._InterprocessEvent, the event behind
// torch.accel.Event(interprocess=True) and Event.from_ipc_handle.
void initInterprocessEventBindings(pybind11::module& m);

} // namespace torch_accel
