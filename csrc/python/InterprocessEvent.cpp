// The event of torch.accel.Event(interprocess=True): an event other processes
// can open (Event.ipc_handle(), Event.from_ipc_handle), as torch.cuda.Event's.
//
// torch.Event, which accel's Event subclasses, creates its backend event
// itself with flags that cannot ask for an interprocess one, and cannot adopt
// an event another process exported; so accel's interprocess events are
// this object, which the runtime creates (Runtime::createInterprocessEvent)
// or opens (Runtime::openInterprocessEvent), and which records, waits and
// queries through the runtime's ordinary event functions. Like CUDA's, the
// event is created lazily: on the device of the stream that first records it,
// or on the current device when ipc_handle() is asked first.

#include <csrc/python/InterprocessEvent.h>
#include <csrc/runtime/Runtime.h>

#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <string>

namespace torch_accel {
namespace {

namespace py = pybind11;

constexpr auto kAccel = c10::DeviceType::PrivateUse1;

class InterprocessEvent {
public:
  explicit InterprocessEvent(bool blocking) : blocking_(blocking) {}

  // The event that `handle` (ipc_handle() of another process) names, on
  // accel:`device`.
  static std::unique_ptr<InterprocessEvent> open(const std::string& handle, int64_t device) {
    checkNotInBadFork();
    checkDeviceIndex(device);
    auto event = std::make_unique<InterprocessEvent>(/*blocking=*/false);
    event->device_ = static_cast<c10::DeviceIndex>(device);
    event->event_ = runtime().openInterprocessEvent(handle, event->device_);
    return event;
  }

  InterprocessEvent(const InterprocessEvent&) = delete;
  InterprocessEvent& operator=(const InterprocessEvent&) = delete;

  ~InterprocessEvent() {
    if (event_ != nullptr && !inBadFork()) {
      runtime().destroyEvent(event_, device_);
    }
  }

  void record(const c10::Stream& stream) {
    checkNotInBadFork();
    checkDeviceIndex(stream.device_index());
    if (event_ == nullptr) {
      create(stream.device_index());
    }
    TORCH_CHECK(
        device_ == stream.device_index(),
        "Event device ",
        c10::Device(kAccel, device_),
        " does not match recording stream's device ",
        stream.device(),
        ".");
    runtime().record(&event_, stream, device_, c10::EventFlag::PYTORCH_DEFAULT);
  }

  void wait(const c10::Stream& stream) const {
    checkNotInBadFork();
    checkDeviceIndex(stream.device_index());
    if (event_ != nullptr) {
      runtime().block(event_, stream);
    }
  }

  bool query() const {
    checkNotInBadFork();
    return event_ == nullptr || runtime().queryEvent(event_);
  }

  void synchronize() const {
    checkNotInBadFork();
    if (event_ != nullptr) {
      runtime().synchronizeEvent(event_);
    }
  }

  py::bytes ipcHandle() {
    checkNotInBadFork();
    if (event_ == nullptr) {
      create(runtime().getDevice().index());
    }
    return py::bytes(runtime().interprocessEventHandle(event_, device_));
  }

  // -1 until the event exists.
  int64_t device() const noexcept {
    return event_ == nullptr ? -1 : device_;
  }

  uintptr_t eventId() const noexcept {
    return reinterpret_cast<uintptr_t>(event_);
  }

private:
  void create(c10::DeviceIndex device) {
    event_ = runtime().createInterprocessEvent(device, blocking_);
    device_ = device;
  }

  bool blocking_;
  c10::DeviceIndex device_ = -1;
  void* event_ = nullptr;
};

c10::Stream unpackStream(int64_t stream_id, int64_t device_index, int64_t device_type) {
  TORCH_CHECK(
      device_type == static_cast<int64_t>(kAccel),
      "Expected an accel stream, got a stream of device type ",
      c10::DeviceTypeName(static_cast<c10::DeviceType>(device_type)));
  checkDeviceIndex(device_index);
  return c10::Stream::unpack3(stream_id, static_cast<c10::DeviceIndex>(device_index), kAccel);
}

} // namespace

void initInterprocessEventBindings(py::module& m) {
  py::class_<InterprocessEvent>(m, "_InterprocessEvent")
      .def(py::init<bool>(), py::arg("blocking"))
      .def_static(
          "open",
          [](const py::bytes& handle, int64_t device) { return InterprocessEvent::open(std::string(handle), device); },
          py::arg("handle"),
          py::arg("device"))
      .def(
          "record",
          [](InterprocessEvent& self, int64_t stream_id, int64_t device_index, int64_t device_type) {
            self.record(unpackStream(stream_id, device_index, device_type));
          })
      .def(
          "wait",
          [](const InterprocessEvent& self, int64_t stream_id, int64_t device_index, int64_t device_type) {
            self.wait(unpackStream(stream_id, device_index, device_type));
          })
      .def("query", &InterprocessEvent::query)
      .def("synchronize", &InterprocessEvent::synchronize, py::call_guard<py::gil_scoped_release>())
      .def("ipc_handle", &InterprocessEvent::ipcHandle)
      .def_property_readonly("device", &InterprocessEvent::device)
      .def_property_readonly("event_id", &InterprocessEvent::eventId);
}

} // namespace torch_accel
