#pragma once

#include <c10/core/Allocator.h>

namespace torch_accel {

// While enabled on the calling thread, the process's CPU allocator hands out
// accelrt memory of the current accel device (see HostTargetAllocator.cpp).
// Returns the previous setting.
bool exchangeCpuAllocationsAreAccel(bool enabled) noexcept;

// That allocator (installed as the CPU allocator on first use).
c10::Allocator* hostTargetAllocator();

} // namespace torch_accel
