#pragma once

// A timing event on an accel stream: how the profiler measures accel device
// time. It is recorded through the PrivateUse1 DeviceGuardImplInterface, so it
// is whatever event the runtime has: a CUDA event on the CUDA runtime, an
// accelrt event on the host runtime (a host timestamp taken when the stream's
// earlier work has completed, which there is at once). The time between two
// such events is the device time of the work enqueued between them.

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

namespace torch_accel {

class DeviceTimingEvent {
public:
  // Records an event on the current stream of accel:`device`.
  explicit DeviceTimingEvent(c10::DeviceIndex device);
  ~DeviceTimingEvent();
  DeviceTimingEvent(const DeviceTimingEvent&) = delete;
  DeviceTimingEvent& operator=(const DeviceTimingEvent&) = delete;

  c10::DeviceIndex device() const noexcept {
    return stream_.device_index();
  }
  const c10::Stream& stream() const noexcept {
    return stream_;
  }

  // Milliseconds from this event to `end` (recorded later on the same
  // device), once both have completed: waits for them, like
  // cudaEventElapsedTime after cudaEventSynchronize.
  double elapsedMs(const DeviceTimingEvent& end) const;

private:
  c10::Stream stream_;
  void* event_ = nullptr;
};

} // namespace torch_accel
