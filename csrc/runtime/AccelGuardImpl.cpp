// The DeviceGuardImplInterface registered for PrivateUse1.
//
// It is registered at load time, before any runtime is selected, so every
// method forwards to runtime() and selection happens on first use. Argument
// checks that do not depend on the runtime (device indices, event/stream
// device agreement, use in a process forked after initialisation) live
// here, so both runtimes report bad input alike. The methods that must not
// throw (deviceCount, uncheckedSetDevice, destroyEvent) check nothing.
// Streams and events report to PyTorch's GPU trace here, once for both
// runtimes (AccelTrace.h).

#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/AccelTrace.h>
#include <csrc/runtime/Runtime.h>

#include <c10/macros/Macros.h>
#include <c10/util/Exception.h>

namespace torch_accel {
namespace {

c10::DeviceIndex resolveIndex(c10::Device device) {
  checkNotInBadFork();
  TORCH_CHECK(device.type() == kAccel, "Expected an accel device, but got ", device);
  // The common case, an existing device named by index (every guard that
  // operators take), costs one device-count query; the checks below only
  // run to report bad input.
  // (A negative index other than -1 can reach here from Python through
  // torch.accelerator: it names no device.)
  if (C10_LIKELY(device.index() >= 0 && device.index() < runtime().deviceCount())) {
    return device.index();
  }
  checkDeviceAvailable();
  const auto index = device.has_index() ? device.index() : runtime().getDevice().index();
  checkDeviceIndex(index);
  return index;
}

c10::Device accelDevice(c10::DeviceIndex index) {
  return c10::Device(kAccel, index);
}

void checkStream(const c10::Stream& stream) {
  checkNotInBadFork();
  TORCH_CHECK(stream.device_type() == kAccel, "Expected an accel stream, but got a stream of device ", stream.device());
  checkDeviceIndex(stream.device_index());
}

struct AccelGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return kAccel;
  }

  c10::Device exchangeDevice(c10::Device device) const override {
    return runtime().exchangeDevice(accelDevice(resolveIndex(device)));
  }

  c10::Device getDevice() const override {
    checkNotInBadFork();
    checkDeviceAvailable();
    return runtime().getDevice();
  }

  void setDevice(c10::Device device) const override {
    runtime().setDevice(accelDevice(resolveIndex(device)));
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    runtime().uncheckedSetDevice(device);
  }

  c10::Stream getStream(c10::Device device) const override {
    return runtime().getStream(accelDevice(resolveIndex(device)));
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return runtime().getDefaultStream(accelDevice(resolveIndex(device)));
  }

  c10::Stream getNewStream(c10::Device device, int priority) const override {
    const auto stream = runtime().getNewStream(accelDevice(resolveIndex(device)), priority);
    trace::streamCreated(stream);
    return stream;
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool isHighPriority) const override {
    const auto stream = runtime().getStreamFromGlobalPool(accelDevice(resolveIndex(device)), isHighPriority);
    trace::streamCreated(stream);
    return stream;
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    checkStream(stream);
    return runtime().exchangeStream(stream);
  }

  void* getStreamNativeHandle(const c10::Stream stream) const override {
    checkStream(stream);
    return runtime().getStreamNativeHandle(stream);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    // Must not throw (c10's contract): a misconfigured runtime has no devices;
    // the configuration error itself surfaces on torch.accel.init().
    try {
      return runtime().deviceCount();
    } catch (...) {
      return 0;
    }
  }

  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    return runtime().getDeviceCapability(accelDevice(resolveIndex(device)));
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index, const c10::EventFlag flag)
      const override {
    checkStream(stream);
    TORCH_CHECK(
        device_index == -1 || device_index == stream.device_index(),
        "Event was recorded on accel:",
        static_cast<int>(device_index),
        " and cannot be recorded on a stream of accel:",
        static_cast<int>(stream.device_index()));
    const bool created = *event == nullptr;
    runtime().record(event, stream, stream.device_index(), flag);
    if (created) {
      trace::eventCreated(*event);
    }
    trace::eventRecorded(*event, stream);
  }

  void block(void* event, const c10::Stream& stream) const override {
    checkStream(stream);
    runtime().block(event, stream);
    // Waiting on an event never recorded is a no-op, as CUDA's.
    if (event != nullptr) {
      trace::eventWaited(event, stream);
    }
  }

  bool queryEvent(void* event) const override {
    checkNotInBadFork();
    return runtime().queryEvent(event);
  }

  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {
    if (event != nullptr) {
      // Reported first: the runtime may hand the same address to the next event.
      trace::eventDeleted(event);
    }
    runtime().destroyEvent(event, device_index);
  }

  bool queryStream(const c10::Stream& stream) const override {
    checkStream(stream);
    return runtime().queryStream(stream);
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    checkStream(stream);
    runtime().synchronizeStream(stream);
    trace::streamSynchronized(stream);
  }

  void synchronizeEvent(void* event) const override {
    checkNotInBadFork();
    runtime().synchronizeEvent(event);
    if (event != nullptr) {
      trace::eventSynchronized(event);
    }
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    checkNotInBadFork();
    checkDeviceIndex(device_index);
    runtime().synchronizeDevice(device_index);
    trace::deviceSynchronized();
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    checkStream(stream);
    runtime().recordDataPtrOnStream(data_ptr, stream);
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex device_index) const override {
    checkNotInBadFork();
    return runtime().elapsedTime(start, end, device_index);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, AccelGuardImpl);

} // namespace
} // namespace torch_accel
