// accel's ProfilerStubs: what PyTorch's profiler calls for PrivateUse1.
//
// With torch.autograd.profiler.profile(use_device="accel") (PyTorch's
// KINETO_PRIVATEUSE1_FALLBACK state), the profiler records one of these
// events when each operator starts and one when it ends, and reports the time
// between them as the operator's accel time (privateuse1_elapsed_us), as it
// does with CUDA events for use_device="cuda" without CUPTI. The events are
// DeviceTimingEvents on the current accel stream, so that time is whatever
// the runtime's events measure (see DeviceTimingEvent.h).
//
// PyTorch does not guard these calls (unlike the CUDA ones): an exception here
// would surface as a broken RecordFunction callback on every operator. So a
// stub that cannot record leaves the event empty, which PyTorch reports as
// "no device time", and says why once.

#include <csrc/core/AccelDevice.h>
#include <csrc/profiler/DeviceTimingEvent.h>
#include <csrc/runtime/Runtime.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <exception>
#include <functional>
#include <memory>

namespace torch_accel {
namespace {

using torch::profiler::impl::ProfilerStubs;
using torch::profiler::impl::ProfilerVoidEventStub;

const c10::impl::DeviceGuardImplInterface& accelGuard() {
  return *c10::impl::getDeviceGuardImpl(kAccel);
}

// The annotation (NVTX-like) stubs of the target device, when PyTorch has
// them: NVTX ranges on the CUDA runtime (registered by libtorch_cuda), ITT
// on the host runtime when PyTorch was built with ITT. nullptr otherwise.
const ProfilerStubs* targetAnnotations() {
  const ProfilerStubs* stubs = nullptr;
  switch (runtime().profilerAnnotations()) {
  case ProfilerAnnotations::Nvtx:
    stubs = torch::profiler::impl::cudaStubs();
    break;
  case ProfilerAnnotations::Itt:
    stubs = torch::profiler::impl::ittStubs();
    break;
  case ProfilerAnnotations::None:
    break;
  }
  return stubs != nullptr && stubs->enabled() ? stubs : nullptr;
}

struct AccelProfilerStubs final : public ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    if (cpu_ns) {
      *cpu_ns = c10::getTime();
    }
    *event = nullptr;
    if (device) {
      *device = -1;
    }
    if (accelGuard().deviceCount() == 0) {
      // torch_accel turns use_device="accel" off in this case (as PyTorch does
      // for cuda), so only a profiler enabled by hand gets here.
      TORCH_WARN_ONCE("accel is not available (no accel device): the profiler records no accel time");
      return;
    }
    try {
      const c10::DeviceIndex current = accelGuard().getDevice().index();
      *event = std::make_shared<DeviceTimingEvent>(current);
      if (device) {
        *device = current;
      }
    } catch (const std::exception& e) {
      TORCH_WARN_ONCE("The profiler could not record an accel event, so some operators have no accel time: ", e.what());
    }
  }

  float elapsed(const ProfilerVoidEventStub* start, const ProfilerVoidEventStub* end) const override {
    const auto* first = static_cast<const DeviceTimingEvent*>(start->get());
    const auto* last = static_cast<const DeviceTimingEvent*>(end->get());
    if (first == nullptr || last == nullptr || first->device() != last->device()) {
      // No time on one device to report (an operator that moved the current
      // device has no single device time; PyTorch treats 0 as none).
      return 0;
    }
    try {
      return static_cast<float>(first->elapsedMs(*last) * 1000.0); // microseconds, as PyTorch expects
    } catch (const std::exception& e) {
      TORCH_WARN_ONCE("The profiler could not measure accel time between two events: ", e.what());
      return 0;
    }
  }

  void mark(const char* name) const override {
    if (const auto* annotations = targetAnnotations()) {
      annotations->mark(name);
    }
  }

  void rangePush(const char* name) const override {
    if (const auto* annotations = targetAnnotations()) {
      annotations->rangePush(name);
    }
  }

  void rangePop() const override {
    if (const auto* annotations = targetAnnotations()) {
      annotations->rangePop();
    }
  }

  bool enabled() const override {
    return true;
  }

  void onEachDevice(std::function<void(int)> op) const override {
    c10::OptionalDeviceGuard device_guard;
    for (const auto index : c10::irange(accelGuard().deviceCount())) {
      device_guard.reset_device(c10::Device(kAccel, index));
      op(index);
    }
  }

  void synchronize() const override {
    // cudaDeviceSynchronize's scope: the current device, every stream.
    if (accelGuard().deviceCount() > 0) {
      accelGuard().synchronizeDevice(accelGuard().getDevice().index());
    }
  }
};

// Registered when torch_accel._C loads, as libtorch_cuda registers CUDA's.
const bool registered = [] {
  static AccelProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  return true;
}();

} // namespace
} // namespace torch_accel
