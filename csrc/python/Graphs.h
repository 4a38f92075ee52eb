#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torch_accel {

// Adds graph capture to torch_accel._C: _AccelGraph (torch._C._CUDAGraph's
// methods), _graph_pool_handle and _is_current_stream_capturing, which
// torch_accel/graphs.py builds on.
void initGraphBindings(pybind11::module& m);

} // namespace torch_accel
