#pragma once

#include <c10/core/Allocator.h>

namespace torch_accel {

// Page-locked host memory from accelrtMallocHost (Tensor.pin_memory()).
c10::Allocator* hostPinnedAllocator();

// Whether `ptr` lies in memory from hostPinnedAllocator.
bool isHostPinnedPtr(const void* ptr);

} // namespace torch_accel
