#pragma once

// What accel reports to PyTorch's GPU trace (c10::impl::GPUTrace): event
// creation, record, wait, synchronisation and deletion, stream creation and
// synchronisation, device synchronisation, and the allocations and frees of
// accel memory. PyTorch forwards each report, under the device type accel,
// to the callbacks of torch.accel._gpu_trace, which the stream sanitizer
// (torch.accel._sanitizer, docs/stream-sanitizer.md) registers; CUDA's guard,
// streams and caching allocator report the same things for cuda.
//
// The reports come from where every accel stream, event and allocation
// passes whichever runtime runs: the PrivateUse1 guard (AccelGuardImpl) and
// interprocess events for streams and events, the runtime's allocator for
// memory (Runtime::memoryTraceDeviceType() says under which device type).
// Until torch._C._activate_gpu_trace() runs nobody listens, and each report
// costs one load of a flag.

#include <csrc/core/AccelDevice.h>

#include <c10/core/Stream.h>
#include <c10/core/impl/GPUTrace.h>
#include <c10/macros/Macros.h>
#include <c10/util/FunctionRef.h>

#include <atomic>
#include <cstdint>

namespace torch_accel::trace {

// The id under which `stream` is reported: its device index above its stream
// id, so that the streams of different devices never share one, and the
// default stream of accel:0 (stream id 0) is 0, the default stream that
// PyTorch's sanitizer starts with. torch_accel._C._trace_stream_id gives
// Python the same id.
inline uintptr_t streamId(c10::DeviceIndex device, c10::StreamId id) noexcept {
  return static_cast<uintptr_t>(static_cast<uint8_t>(device)) << 48 |
         (static_cast<uintptr_t>(id) & ((uintptr_t{1} << 48) - 1));
}

inline uintptr_t streamId(const c10::Stream& stream) noexcept {
  return streamId(stream.device_index(), stream.id());
}

// Runs one report. PyTorch's trace hook calls into Python (it imports the
// _gpu_trace module), which fails while a Python exception is pending on the
// thread, and that failure replaces the pending exception: an operator's
// error became "SystemError: error return without exception set" when its
// arguments were freed (reported) as the error propagated. The Python layer
// (csrc/python/Module.cpp) installs a runner that sets a pending exception
// aside around each report; the runtime code that reports cannot touch Python.
// Defined once, in the core (AccelTrace.cpp), not as an inline variable: the
// bindings are a library of their own whose hidden copy of an inline variable
// the runtime would never read.
using ReportRunner = void (*)(c10::function_ref<void()> report);
extern std::atomic<ReportRunner> report_runner;

inline void run(c10::function_ref<void()> report) {
  if (const ReportRunner runner = report_runner.load(std::memory_order_acquire)) {
    runner(report);
  } else {
    report();
  }
}

// The listener, or null while nobody listens (the common case).
inline const c10::impl::PyInterpreter* listener() noexcept {
  return c10::impl::GPUTrace::get_trace();
}

inline void eventCreated(const void* event) {
  if (const auto* interp = listener(); C10_UNLIKELY(interp != nullptr)) {
    run([&] { (*interp)->trace_gpu_event_creation(kAccel, reinterpret_cast<uintptr_t>(event)); });
  }
}

inline void eventDeleted(const void* event) {
  if (const auto* interp = listener(); C10_UNLIKELY(interp != nullptr)) {
    run([&] { (*interp)->trace_gpu_event_deletion(kAccel, reinterpret_cast<uintptr_t>(event)); });
  }
}

inline void eventRecorded(const void* event, const c10::Stream& stream) {
  if (const auto* interp = listener(); C10_UNLIKELY(interp != nullptr)) {
    run([&] { (*interp)->trace_gpu_event_record(kAccel, reinterpret_cast<uintptr_t>(event), streamId(stream)); });
  }
}

inline void eventWaited(const void* event, const c10::Stream& stream) {
  if (const auto* interp = listener(); C10_UNLIKELY(interp != nullptr)) {
    run([&] { (*interp)->trace_gpu_event_wait(kAccel, reinterpret_cast<uintptr_t>(event), streamId(stream)); });
  }
}

inline void eventSynchronized(const void* event) {
  if (const auto* interp = listener(); C10_UNLIKELY(interp != nullptr)) {
    run([&] { (*interp)->trace_gpu_event_synchronization(kAccel, reinterpret_cast<uintptr_t>(event)); });
  }
}

inline void streamCreated(const c10::Stream& stream) {
  if (const auto* interp = listener(); C10_UNLIKELY(interp != nullptr)) {
    run([&] { (*interp)->trace_gpu_stream_creation(kAccel, streamId(stream)); });
  }
}

inline void streamSynchronized(const c10::Stream& stream) {
  if (const auto* interp = listener(); C10_UNLIKELY(interp != nullptr)) {
    run([&] { (*interp)->trace_gpu_stream_synchronization(kAccel, streamId(stream)); });
  }
}

inline void deviceSynchronized() {
  if (const auto* interp = listener(); C10_UNLIKELY(interp != nullptr)) {
    run([&] { (*interp)->trace_gpu_device_synchronization(kAccel); });
  }
}

inline void memoryAllocated(const void* ptr) {
  if (const auto* interp = listener(); C10_UNLIKELY(interp != nullptr && ptr != nullptr)) {
    run([&] { (*interp)->trace_gpu_memory_allocation(kAccel, reinterpret_cast<uintptr_t>(ptr)); });
  }
}

inline void memoryFreed(const void* ptr) {
  if (const auto* interp = listener(); C10_UNLIKELY(interp != nullptr && ptr != nullptr)) {
    run([&] { (*interp)->trace_gpu_memory_deallocation(kAccel, reinterpret_cast<uintptr_t>(ptr)); });
  }
}

} // namespace torch_accel::trace
