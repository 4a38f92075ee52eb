// The event of torch.accel.Event(interprocess=True): an event other processes
// can open (Event.ipc_handle(), Event.from_ipc_handle), as torch.cuda.Event's.
//
// torch.Event, which accel's Event subclasses, creates its backend event
// itself with flags that cannot ask for an interprocess one, and cannot adopt
// an event another process exported; so accel's interprocess events are
// this object, which the runtime creates (Runtime::createInterprocessEvent)
// or opens (Runtime::openInterprocessEvent), and which records, waits and
// queries through the runtime's ordinary event functions. A process opening a
// handle it exported gets that event itself (CUDA opens only other processes'
// handles). Like CUDA's, the event is created lazily: on the device of the
// stream that first records it, or on the current device when ipc_handle()
// is asked first. Being the runtime's events without the PrivateUse1 guard
// in between, they report to PyTorch's GPU trace themselves, as the guard
// does for torch.Event's (csrc/runtime/AccelTrace.h).

#include <csrc/core/AccelDevice.h>
#include <csrc/python/InterprocessEvent.h>
#include <csrc/runtime/AccelTrace.h>
#include <csrc/runtime/Runtime.h>

#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace torch_accel {
namespace {

namespace py = pybind11;

// One runtime event, destroyed with the last InterprocessEvent that uses it.
class RuntimeEvent {
public:
  RuntimeEvent(void* event, c10::DeviceIndex device) : event_(event), device_(device) {}
  RuntimeEvent(const RuntimeEvent&) = delete;
  RuntimeEvent& operator=(const RuntimeEvent&) = delete;
  ~RuntimeEvent() {
    if (!inBadFork()) {
      trace::eventDeleted(event_);
      runtime().destroyEvent(event_, device_);
    }
  }

  void* get() const noexcept {
    return event_;
  }
  c10::DeviceIndex device() const noexcept {
    return device_;
  }

private:
  void* const event_;
  const c10::DeviceIndex device_;
};

// The events this process exported, by handle: a process cannot open its own
// handles through CUDA (cudaIpcOpenEventHandle refuses them), so
// from_ipc_handle of one of them gives the exported event itself.
class ExportedEvents {
public:
  void add(const std::string& handle, const std::shared_ptr<RuntimeEvent>& event) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = events_.begin(); it != events_.end();) {
      it = it->second.expired() ? events_.erase(it) : std::next(it);
    }
    events_[handle] = event;
  }

  std::shared_ptr<RuntimeEvent> find(const std::string& handle) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = events_.find(handle);
    return it == events_.end() ? nullptr : it->second.lock();
  }

private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::weak_ptr<RuntimeEvent>> events_;
};

ExportedEvents& exportedEvents() {
  static auto* events = new ExportedEvents(); // leaked: used until exit
  return *events;
}

class InterprocessEvent {
public:
  explicit InterprocessEvent(bool blocking) : blocking_(blocking) {}

  // The event that `handle` (ipc_handle() of this or another process) names,
  // on accel:`device`.
  static std::unique_ptr<InterprocessEvent> open(const std::string& handle, int64_t device) {
    checkNotInBadFork();
    checkDeviceIndex(device);
    auto event = std::make_unique<InterprocessEvent>(/*blocking=*/false);
    event->event_ = exportedEvents().find(handle);
    if (event->event_ == nullptr) {
      const auto index = static_cast<c10::DeviceIndex>(device);
      event->event_ = std::make_shared<RuntimeEvent>(runtime().openInterprocessEvent(handle, index), index);
    }
    return event;
  }

  void record(const c10::Stream& stream) {
    checkNotInBadFork();
    checkDeviceIndex(stream.device_index());
    if (event_ == nullptr) {
      create(stream.device_index());
    }
    TORCH_CHECK(
        event_->device() == stream.device_index(),
        "Event device ",
        c10::Device(kAccel, event_->device()),
        " does not match recording stream's device ",
        stream.device(),
        ".");
    void* event = event_->get();
    runtime().record(&event, stream, event_->device(), c10::EventFlag::PYTORCH_DEFAULT);
    trace::eventRecorded(event, stream);
  }

  void wait(const c10::Stream& stream) const {
    checkNotInBadFork();
    checkDeviceIndex(stream.device_index());
    if (event_ != nullptr) {
      runtime().block(event_->get(), stream);
      trace::eventWaited(event_->get(), stream);
    }
  }

  bool query() const {
    checkNotInBadFork();
    return event_ == nullptr || runtime().queryEvent(event_->get());
  }

  void synchronize() const {
    checkNotInBadFork();
    if (event_ != nullptr) {
      runtime().synchronizeEvent(event_->get());
      trace::eventSynchronized(event_->get());
    }
  }

  py::bytes ipcHandle() {
    checkNotInBadFork();
    if (event_ == nullptr) {
      create(runtime().getDevice().index());
    }
    std::string handle = runtime().interprocessEventHandle(event_->get(), event_->device());
    exportedEvents().add(handle, event_);
    return py::bytes(handle);
  }

  // -1 until the event exists.
  int64_t device() const noexcept {
    return event_ == nullptr ? -1 : event_->device();
  }

  uintptr_t eventId() const noexcept {
    return event_ == nullptr ? 0 : reinterpret_cast<uintptr_t>(event_->get());
  }

private:
  void create(c10::DeviceIndex device) {
    event_ = std::make_shared<RuntimeEvent>(runtime().createInterprocessEvent(device, blocking_), device);
  }

  const bool blocking_;
  std::shared_ptr<RuntimeEvent> event_;
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
