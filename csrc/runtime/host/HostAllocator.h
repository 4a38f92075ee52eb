#pragma once

#include <c10/core/CachingDeviceAllocator.h>

namespace torch_accel {

// accelrt device memory, handed out as DataPtrs that name accel devices.
c10::DeviceAllocator* hostAllocator();

} // namespace torch_accel
