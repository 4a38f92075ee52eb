#include <csrc/core/AccelDevice.h>
#include <csrc/profiler/DeviceTimingEvent.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

namespace torch_accel {
namespace {

const c10::impl::DeviceGuardImplInterface& accelGuard() {
  return *c10::impl::getDeviceGuardImpl(kAccel);
}

} // namespace

DeviceTimingEvent::DeviceTimingEvent(c10::DeviceIndex device)
    : stream_(accelGuard().getStream(c10::Device(kAccel, device))) {
  // BACKEND_DEFAULT: an event that keeps time (PYTORCH_DEFAULT would create
  // CUDA events with timing disabled).
  accelGuard().record(&event_, stream_, device, c10::EventFlag::BACKEND_DEFAULT);
}

DeviceTimingEvent::~DeviceTimingEvent() {
  accelGuard().destroyEvent(event_, device());
}

double DeviceTimingEvent::elapsedMs(const DeviceTimingEvent& end) const {
  TORCH_CHECK(
      device() == end.device(),
      "accel profiler events were recorded on two devices (accel:",
      static_cast<int>(device()),
      " and accel:",
      static_cast<int>(end.device()),
      "): no device time between them");
  const auto& guard = accelGuard();
  guard.synchronizeEvent(event_);
  guard.synchronizeEvent(end.event_);
  return guard.elapsedTime(event_, end.event_, device());
}

} // namespace torch_accel
