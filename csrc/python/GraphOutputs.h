#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torch_accel {

// Adds _GraphOutputs to torch_accel._C: what torch.compile(mode=
// "reduce-overhead")'s accel graph wrapper (torch_accel/_inductor_graphs.py)
// hands out at each replay of a captured graph.
void initGraphOutputsBindings(pybind11::module& m);

} // namespace torch_accel
