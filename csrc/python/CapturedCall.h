#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torch_accel {

// Adds _CapturedCall to torch_accel._C: one capture of a compiled graph as
// torch.compile(mode="reduce-overhead")'s accel graph wrapper
// (torch_accel/_inductor/graphs.py) replays it.
void initCapturedCallBindings(pybind11::module& m);

} // namespace torch_accel
