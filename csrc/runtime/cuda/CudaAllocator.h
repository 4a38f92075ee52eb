#pragma once

#include <csrc/runtime/ObservableAllocator.h>

namespace torch_accel {

// CUDA's caching allocator, handing out DataPtrs that name accel devices.
ObservableAllocator* cudaAllocator();

} // namespace torch_accel
