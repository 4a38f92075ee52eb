#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torch_accel {

// Adds memory observability to torch_accel._C: history recording, snapshots
// in the format of torch.cuda.memory._snapshot, out-of-memory observers and
// the per-process memory fraction (torch_accel/memory.py builds on them).
void initMemoryBindings(pybind11::module& m);

} // namespace torch_accel
