// DistributedDataParallel's timer for accel modules.
//
// DDP's logger samples, per iteration, how long the forward pass, the backward
// computation and the gradient communication took; it asks TimerRegistry for
// a timer of the module's device type and, finding none for accel, warns and
// records nothing. This one times the device side as DDP's CUDA timer does:
// with timing events on the current accel stream (CUDA events on the CUDA
// runtime, host timestamps on the host runtime).

#include <csrc/core/AccelDevice.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <optional>

namespace torch_accel {
namespace {

class AccelTimer final : public c10d::Timer {
public:
  explicit AccelTimer(c10::Device device) : device_(device) {}

  void record(Event event) override {
    // The host-side time, which DDP also reports, then the device-side one.
    Timer::record(event);
    c10::DeviceGuard guard(device_);
    eventFor(event).record(c10::impl::VirtualGuardImpl(kAccel).getStream(device_));
  }

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    const c10::Event& start_event = eventFor(start);
    const c10::Event& end_event = eventFor(end);
    // An event never recorded (no backward pass yet) has nothing to measure.
    if (!start_event.was_marked_for_recording() || !end_event.was_marked_for_recording()) {
      return std::nullopt;
    }
    c10::DeviceGuard guard(device_);
    // DDP measures at the next forward pass, when the previous iteration's
    // work has mostly finished: waiting here is cheap.
    start_event.synchronize();
    end_event.synchronize();
    const double milliseconds = start_event.elapsedTime(end_event);
    // An end recorded before its start (an iteration under no_sync, which
    // records no communication) is no measurement either.
    if (milliseconds < 0) {
      return std::nullopt;
    }
    return static_cast<int64_t>(milliseconds * 1e6);
  }

private:
  c10::Event& eventFor(Event event) {
    switch (event) {
    case Event::kForwardStart:
      return forward_start_;
    case Event::kBackwardComputeStart:
      return backward_compute_start_;
    case Event::kBackwardComputeEnd:
      return backward_compute_end_;
    case Event::kBackwardCommStart:
      return backward_comm_start_;
    case Event::kBackwardCommEnd:
      return backward_comm_end_;
    }
    TORCH_INTERNAL_ASSERT(false, "unknown DDP timer event");
  }

  // Timing events (BACKEND_DEFAULT), re-recorded every iteration; each is
  // created on its first record.
  const c10::Device device_;
  c10::Event forward_start_{kAccel, c10::EventFlag::BACKEND_DEFAULT};
  c10::Event backward_compute_start_{kAccel, c10::EventFlag::BACKEND_DEFAULT};
  c10::Event backward_compute_end_{kAccel, c10::EventFlag::BACKEND_DEFAULT};
  c10::Event backward_comm_start_{kAccel, c10::EventFlag::BACKEND_DEFAULT};
  c10::Event backward_comm_end_{kAccel, c10::EventFlag::BACKEND_DEFAULT};
};

} // namespace
} // namespace torch_accel

namespace c10d {
// The registry lives in c10d; its registration macro names it unqualified.
C10_REGISTER_TYPED_CLASS(TimerRegistry, torch_accel::kAccel, torch_accel::AccelTimer);
} // namespace c10d
