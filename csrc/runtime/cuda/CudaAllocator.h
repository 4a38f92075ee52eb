#pragma once

#include <c10/core/CachingDeviceAllocator.h>

namespace torch_accel {

// CUDA's caching allocator, handing out DataPtrs that name accel devices.
c10::DeviceAllocator* cudaAllocator();

} // namespace torch_accel
