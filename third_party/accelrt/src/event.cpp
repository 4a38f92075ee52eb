// Events: registry of live event handles, recording (timestamps), elapsed time.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "internal.h"

namespace accelrt {
namespace detail {
namespace {

constexpr unsigned kValidEventFlags = accelrtEventBlockingSync | accelrtEventDisableTiming;

struct EventInfo {
  unsigned flags = 0;
  int device = 0; // current device at creation; the stream's device once recorded
  bool recorded = false;
  std::int64_t timestamp_ns = 0; // steady_clock time of the last record
};

struct EventRegistry {
  std::mutex mutex;
  std::unordered_map<std::uintptr_t, EventInfo> live; // by handle value
};

EventRegistry& registry() {
  return leaked_singleton<EventRegistry>();
}

std::uintptr_t key(accelrtEvent_t event) {
  return reinterpret_cast<std::uintptr_t>(event);
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

} // namespace

accelrtError_t validate_event(accelrtEvent_t event) {
  if (event == nullptr)
    return accelrtErrorInvalidResourceHandle;
  EventRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.live.count(key(event)) != 0 ? accelrtSuccess : accelrtErrorInvalidResourceHandle;
}

} // namespace detail
} // namespace accelrt

using namespace accelrt::detail;

extern "C" {

accelrtError_t accelrtEventCreate(accelrtEvent_t* event) {
  return accelrtEventCreateWithFlags(event, accelrtEventDefault);
}

accelrtError_t accelrtEventCreateWithFlags(accelrtEvent_t* event, unsigned int flags) {
  if (event == nullptr)
    return accelrtErrorInvalidValue;
  if ((flags & ~kValidEventFlags) != 0)
    return accelrtErrorInvalidValue;
  EventInfo info;
  const accelrtError_t err = current_device(&info.device);
  if (err != accelrtSuccess)
    return err;
  if (const accelrtError_t fault = injected_fault(accelrtFaultStreamEvent); fault != accelrtSuccess)
    return fault;
  info.flags = flags;
  const std::uintptr_t handle = new_handle(HandleTag::kEvent);
  EventRegistry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.live.emplace(handle, info);
  }
  *event = reinterpret_cast<accelrtEvent_t>(handle);
  return accelrtSuccess;
}

accelrtError_t accelrtEventDestroy(accelrtEvent_t event) {
  if (event == nullptr)
    return accelrtErrorInvalidResourceHandle;
  EventRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.live.erase(key(event)) != 0 ? accelrtSuccess : accelrtErrorInvalidResourceHandle;
}

accelrtError_t accelrtEventGetDevice(accelrtEvent_t event, int* device) {
  if (device == nullptr)
    return accelrtErrorInvalidValue;
  if (event == nullptr)
    return accelrtErrorInvalidResourceHandle;
  EventRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.find(key(event));
  if (it == r.live.end())
    return accelrtErrorInvalidResourceHandle;
  *device = it->second.device;
  return accelrtSuccess;
}

accelrtError_t accelrtEventRecord(accelrtEvent_t event, accelrtStream_t stream) {
  if (event == nullptr)
    return accelrtErrorInvalidResourceHandle;
  // Resolve the stream first (its registry lock is never held together with the event lock).
  StreamInfo stream_info;
  const accelrtError_t err = lookup_stream(stream, &stream_info);
  if (err != accelrtSuccess)
    return err;
  // All earlier work on the stream has completed, so the event completes now.
  const std::int64_t timestamp = now_ns();
  EventRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.find(key(event));
  if (it == r.live.end())
    return accelrtErrorInvalidResourceHandle;
  if (const accelrtError_t fault = injected_fault(accelrtFaultStreamEvent); fault != accelrtSuccess)
    return fault;
  it->second.device = stream_info.device;
  it->second.recorded = true;
  it->second.timestamp_ns = timestamp;
  return accelrtSuccess;
}

accelrtError_t accelrtEventQuery(accelrtEvent_t event) {
  // Recorded events are complete at once; never-recorded events count as complete.
  const accelrtError_t err = validate_event(event);
  if (err != accelrtSuccess)
    return err;
  return injected_fault(accelrtFaultStreamEvent);
}

accelrtError_t accelrtEventSynchronize(accelrtEvent_t event) {
  const accelrtError_t err = validate_event(event);
  if (err != accelrtSuccess)
    return err;
  return injected_fault(accelrtFaultStreamEvent);
}

accelrtError_t accelrtEventElapsedTime(float* ms, accelrtEvent_t start, accelrtEvent_t end) {
  if (ms == nullptr)
    return accelrtErrorInvalidValue;
  if (start == nullptr || end == nullptr)
    return accelrtErrorInvalidResourceHandle;
  EventRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto start_it = r.live.find(key(start));
  auto end_it = r.live.find(key(end));
  if (start_it == r.live.end() || end_it == r.live.end())
    return accelrtErrorInvalidResourceHandle;
  const EventInfo& s = start_it->second;
  const EventInfo& e = end_it->second;
  if (((s.flags | e.flags) & accelrtEventDisableTiming) != 0)
    return accelrtErrorInvalidResourceHandle;
  if (!s.recorded || !e.recorded)
    return accelrtErrorNotReady;
  if (const accelrtError_t fault = injected_fault(accelrtFaultStreamEvent); fault != accelrtSuccess)
    return fault;
  *ms = static_cast<float>(static_cast<double>(e.timestamp_ns - s.timestamp_ns) / 1.0e6);
  return accelrtSuccess;
}

} // extern "C"
