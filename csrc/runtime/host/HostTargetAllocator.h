#pragma once

namespace torch_accel {

// While enabled on the calling thread, the process's CPU allocator hands out
// accelrt memory of the current accel device (see HostTargetAllocator.cpp).
// Returns the previous setting.
bool exchangeCpuAllocationsAreAccel(bool enabled) noexcept;

} // namespace torch_accel
