#pragma once

// Captures that record work instead of letting the runtime capture it.
//
// accelrt (the host runtime) runs each piece of work as it is issued, so a
// stream cannot capture work the way a CUDA stream does. A host capture
// (runtime/host/HostGraph) registers here instead, and the accel kernels that
// run work (csrc/aten: the alias fallback and the unboxed kernels through
// csrc/graphs/GraphCapture.h, copies) ask, before running anything, whether the current
// stream of their device is being recorded; if so, they record a step that
// replays the work and hand back results without running it. Whatever needs
// the results of the recorded work (a synchronisation, Tensor.item(), a copy
// to pageable host memory) cannot happen during a capture, as on CUDA: it
// fails the capture.
//
// Captures that CUDA makes never register: while none records, accel
// kernels pay one relaxed atomic load (anyCaptureRecording) for all this.

#include <c10/core/Stream.h>
#include <c10/macros/Macros.h>

#include <atomic>
#include <functional>
#include <string>

namespace torch_accel {

class RecordingCapture {
public:
  virtual ~RecordingCapture() = default;

  // Appends a step that replay() runs, in recording order, with accel:
  // `device` current; `name` (the operator's) describes it in debug dumps.
  virtual void record(std::string name, c10::DeviceIndex device, std::function<void()> step) = 0;

  // Invalidates the capture (captureEnd() then fails, as CUDA's
  // cudaStreamEndCapture does after a forbidden call), keeping the first
  // `message` for captureEnd's error. Once invalidated, every further
  // recording attempt fails too.
  virtual void invalidate(const std::string& message) = 0;

  // invalidate(message), then throws `message`.
  [[noreturn]] void fail(const std::string& message);

  // Throws (through fail) if the capture was invalidated.
  virtual void checkValid() = 0;
};

namespace detail {
extern std::atomic<int> recording_captures;
} // namespace detail

// Whether any capture records work in this process (cheap: one relaxed
// load). Only if so is recordingCaptureOf worth asking.
inline bool anyCaptureRecording() noexcept {
  return detail::recording_captures.load(std::memory_order_relaxed) != 0;
}

// `stream`'s work goes to `capture` until stopRecording(capture). A stream
// that another capture records raises an error.
void startRecording(const c10::Stream& stream, RecordingCapture* capture);

// `event` was recorded on `stream`: in the capture that records `stream`'s
// work, if one does (otherwise an earlier capture's record is forgotten).
void noteEventRecorded(const void* event, const c10::Stream& stream);

// `event` is destroyed: forgets which capture it was recorded in (a new
// event may get its address).
void forgetEvent(const void* event) noexcept;

// `stream` waits on `event`. An event recorded in a capture brings the
// waiting stream into that capture (CUDA's fork of a capture onto another
// stream); a capturing stream cannot wait on work outside its capture: that
// fails its capture (as failCaptureOfStream).
void joinOrCheckCapture(const void* event, const c10::Stream& stream);

// Forgets every stream and event of `capture`. Once it returns, no other
// thread can reach `capture` through the functions of this file.
void stopRecording(RecordingCapture* capture) noexcept;

// The capture that records `stream`'s work, or nullptr. Only for a thread
// that issues work on `stream` or owns the capture: another thread's
// stopRecording may end the capture, and its owner destroy it, at any time.
RecordingCapture* recordingCaptureOf(const c10::Stream& stream);

// The capture recording the current stream of accel:`device`, or nullptr.
RecordingCapture* recordingCaptureOnCurrentStream(c10::DeviceIndex device);

// Raises CUDA's "operation not permitted when stream is capturing" for
// `operation` (named for the user) and invalidates `capture`.
[[noreturn]] void failCapture(RecordingCapture& capture, const std::string& operation, c10::DeviceIndex device);

// failCapture for the capture that records `stream`, that `event` was
// recorded in, or that records any stream of accel:`device`; nothing if there
// is none. The capture may belong to another thread: it is found and
// invalidated under the lock that stopRecording takes, so that it cannot end
// and be destroyed in between (the operation then raises after the lock).
void failCaptureOfStream(const c10::Stream& stream, const std::string& operation);
void failCaptureOfEvent(const void* event, const std::string& operation, c10::DeviceIndex device);
void failCaptureOnDevice(c10::DeviceIndex device, const std::string& operation);

// failCaptureOfStream for the current stream of accel:`device`.
void failCaptureOfCurrentStream(c10::DeviceIndex device, const std::string& operation);

// failCapture if the current stream of accel:`device` is being recorded.
inline void checkCurrentStreamNotRecording(c10::DeviceIndex device, const char* operation) {
  if (C10_UNLIKELY(anyCaptureRecording())) {
    failCaptureOfCurrentStream(device, operation);
  }
}

} // namespace torch_accel
