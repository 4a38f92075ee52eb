#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/GraphRecording.h>
#include <csrc/runtime/Runtime.h>

#include <c10/util/Exception.h>

#include <mutex>
#include <utility>
#include <vector>

namespace torch_accel {

namespace detail {
std::atomic<int> recording_captures{0};
} // namespace detail

namespace {

// The streams being recorded and their captures. Captures are few and short
// lived, and the list is read only while one records: a vector under a lock.
struct Recordings {
  std::mutex mutex;
  std::vector<std::pair<c10::Stream, RecordingCapture*>> streams;
  std::vector<std::pair<const void*, RecordingCapture*>> events;
};

Recordings& recordings() {
  static auto* instance = new Recordings(); // never destroyed: captures may end during exit
  return *instance;
}

RecordingCapture* findLocked(const Recordings& all, const c10::Stream& stream) {
  for (const auto& [recorded, capture] : all.streams) {
    if (recorded == stream) {
      return capture;
    }
  }
  return nullptr;
}

void add(const c10::Stream& stream, RecordingCapture* capture) {
  auto& all = recordings();
  std::lock_guard<std::mutex> lock(all.mutex);
  RecordingCapture* current = findLocked(all, stream);
  if (current == capture) {
    return;
  }
  TORCH_CHECK(
      current == nullptr,
      "accel stream ",
      stream.id(),
      " on accel:",
      static_cast<int>(stream.device_index()),
      " is already capturing a graph");
  all.streams.emplace_back(stream, capture);
  detail::recording_captures.fetch_add(1, std::memory_order_relaxed);
}

// CUDA's "operation not permitted when stream is capturing" for `operation`.
std::string captureFailure(const std::string& operation, c10::DeviceIndex device) {
  return c10::str(
      "accel: ",
      operation,
      " is not permitted while a stream of accel:",
      static_cast<int>(device),
      " is capturing a graph (CUDA: operation not permitted when stream is capturing): it needs the results of "
      "work that the capture records instead of running. The capture is invalidated; capture again without it");
}

// Invalidates `capture` (found under `lock`, still held) and raises, after
// the lock, the failure of `operation`; nothing if `capture` is nullptr.
void invalidateAndRaise(
    std::unique_lock<std::mutex>& lock,
    RecordingCapture* capture,
    const std::string& operation,
    c10::DeviceIndex device) {
  if (capture == nullptr) {
    return;
  }
  const std::string message = captureFailure(operation, device);
  capture->invalidate(message);
  lock.unlock();
  TORCH_CHECK(false, message);
}

RecordingCapture* eventCaptureLocked(const Recordings& all, const void* event) {
  for (const auto& [recorded, capture] : all.events) {
    if (recorded == event) {
      return capture;
    }
  }
  return nullptr;
}

void forgetEventLocked(Recordings& all, const void* event) {
  for (auto it = all.events.begin(); it != all.events.end(); ++it) {
    if (it->first == event) {
      all.events.erase(it);
      return;
    }
  }
}

} // namespace

void startRecording(const c10::Stream& stream, RecordingCapture* capture) {
  add(stream, capture);
}

void noteEventRecorded(const void* event, const c10::Stream& stream) {
  auto& all = recordings();
  std::lock_guard<std::mutex> lock(all.mutex);
  forgetEventLocked(all, event);
  if (RecordingCapture* capture = findLocked(all, stream)) {
    all.events.emplace_back(event, capture);
  }
}

void forgetEvent(const void* event) noexcept {
  auto& all = recordings();
  std::lock_guard<std::mutex> lock(all.mutex);
  forgetEventLocked(all, event);
}

void joinOrCheckCapture(const void* event, const c10::Stream& stream) {
  auto& all = recordings();
  std::unique_lock<std::mutex> lock(all.mutex);
  RecordingCapture* event_capture = eventCaptureLocked(all, event);
  RecordingCapture* stream_capture = findLocked(all, stream);
  if (event_capture != nullptr && stream_capture == nullptr) {
    all.streams.emplace_back(stream, event_capture);
    detail::recording_captures.fetch_add(1, std::memory_order_relaxed);
  } else if (stream_capture != nullptr && event_capture != stream_capture) {
    invalidateAndRaise(
        lock,
        stream_capture,
        "making a capturing stream wait on an event recorded outside its capture (Stream.wait_event, "
        "Stream.wait_stream)",
        stream.device_index());
  }
}

void stopRecording(RecordingCapture* capture) noexcept {
  auto& all = recordings();
  std::lock_guard<std::mutex> lock(all.mutex);
  for (auto it = all.events.begin(); it != all.events.end();) {
    it = it->second == capture ? all.events.erase(it) : it + 1;
  }
  for (auto it = all.streams.begin(); it != all.streams.end();) {
    if (it->second == capture) {
      it = all.streams.erase(it);
      detail::recording_captures.fetch_sub(1, std::memory_order_relaxed);
    } else {
      ++it;
    }
  }
}

RecordingCapture* recordingCaptureOf(const c10::Stream& stream) {
  auto& all = recordings();
  std::lock_guard<std::mutex> lock(all.mutex);
  return findLocked(all, stream);
}

RecordingCapture* recordingCaptureOnCurrentStream(c10::DeviceIndex device) {
  return recordingCaptureOf(runtime().getStream(c10::Device(kAccel, device)));
}

void RecordingCapture::fail(const std::string& message) {
  invalidate(message);
  TORCH_CHECK(false, message);
}

void failCapture(RecordingCapture& capture, const std::string& operation, c10::DeviceIndex device) {
  capture.fail(captureFailure(operation, device));
}

void failCaptureOfStream(const c10::Stream& stream, const std::string& operation) {
  auto& all = recordings();
  std::unique_lock<std::mutex> lock(all.mutex);
  invalidateAndRaise(lock, findLocked(all, stream), operation, stream.device_index());
}

void failCaptureOfEvent(const void* event, const std::string& operation, c10::DeviceIndex device) {
  auto& all = recordings();
  std::unique_lock<std::mutex> lock(all.mutex);
  invalidateAndRaise(lock, eventCaptureLocked(all, event), operation, device);
}

void failCaptureOnDevice(c10::DeviceIndex device, const std::string& operation) {
  auto& all = recordings();
  std::unique_lock<std::mutex> lock(all.mutex);
  for (const auto& [stream, capture] : all.streams) {
    if (stream.device_index() == device) {
      invalidateAndRaise(lock, capture, operation, device);
    }
  }
}

void failCaptureOfCurrentStream(c10::DeviceIndex device, const std::string& operation) {
  failCaptureOfStream(runtime().getStream(c10::Device(kAccel, device)), operation);
}

} // namespace torch_accel
