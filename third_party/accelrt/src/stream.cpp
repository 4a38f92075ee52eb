// Streams: registry of live stream handles, per-device default streams, priorities, host functions.
#include <algorithm>
#include <array>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "internal.h"

namespace accelrt {
namespace detail {
namespace {

constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -1;
constexpr unsigned kValidStreamFlags = accelrtStreamDefault | accelrtStreamNonBlocking;

struct StreamRegistry {
  StreamRegistry() {
    for (int d = 0; d < kMaxDevices; ++d) {
      default_streams[static_cast<std::size_t>(d)].device = d;
      default_streams[static_cast<std::size_t>(d)].is_default = true;
    }
  }
  std::mutex mutex;
  std::unordered_map<std::uintptr_t, StreamInfo> live; // by handle value
  // The default stream (NULL handle) of each device; immutable after construction.
  std::array<StreamInfo, kMaxDevices> default_streams;
};

StreamRegistry& registry() {
  return leaked_singleton<StreamRegistry>();
}

} // namespace

accelrtError_t lookup_stream(accelrtStream_t stream, StreamInfo* info) {
  StreamRegistry& r = registry();
  if (stream == nullptr) {
    int device = 0;
    const accelrtError_t err = current_device(&device);
    if (err != accelrtSuccess)
      return err;
    *info = r.default_streams[static_cast<std::size_t>(device)];
    return accelrtSuccess;
  }
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.find(reinterpret_cast<std::uintptr_t>(stream));
  if (it == r.live.end())
    return accelrtErrorInvalidResourceHandle;
  *info = it->second;
  return accelrtSuccess;
}

} // namespace detail
} // namespace accelrt

using namespace accelrt::detail;

extern "C" {

accelrtError_t accelrtStreamCreate(accelrtStream_t* stream) {
  return accelrtStreamCreateWithPriority(stream, accelrtStreamDefault, kLeastPriority);
}

accelrtError_t accelrtStreamCreateWithPriority(accelrtStream_t* stream, unsigned int flags, int priority) {
  if (stream == nullptr)
    return accelrtErrorInvalidValue;
  if ((flags & ~kValidStreamFlags) != 0)
    return accelrtErrorInvalidValue;
  StreamInfo info;
  const accelrtError_t err = current_device(&info.device);
  if (err != accelrtSuccess)
    return err;
  if (const accelrtError_t fault = injected_fault(accelrtFaultStreamEvent); fault != accelrtSuccess)
    return fault;
  info.priority = std::min(kLeastPriority, std::max(kGreatestPriority, priority));
  info.flags = flags;
  info.is_default = false;
  const std::uintptr_t handle = new_handle(HandleTag::kStream);
  StreamRegistry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.live.emplace(handle, info);
  }
  *stream = reinterpret_cast<accelrtStream_t>(handle);
  return accelrtSuccess;
}

accelrtError_t accelrtStreamDestroy(accelrtStream_t stream) {
  if (stream == nullptr)
    return accelrtErrorInvalidResourceHandle; // the default stream is permanent
  StreamRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  // Pending work would be completed first; there never is any.
  if (r.live.erase(reinterpret_cast<std::uintptr_t>(stream)) == 0) {
    return accelrtErrorInvalidResourceHandle;
  }
  return accelrtSuccess;
}

accelrtError_t accelrtStreamGetDevice(accelrtStream_t stream, int* device) {
  if (device == nullptr)
    return accelrtErrorInvalidValue;
  StreamInfo info;
  const accelrtError_t err = lookup_stream(stream, &info);
  if (err != accelrtSuccess)
    return err;
  *device = info.device;
  return accelrtSuccess;
}

accelrtError_t accelrtStreamGetPriority(accelrtStream_t stream, int* priority) {
  if (priority == nullptr)
    return accelrtErrorInvalidValue;
  StreamInfo info;
  const accelrtError_t err = lookup_stream(stream, &info);
  if (err != accelrtSuccess)
    return err;
  *priority = info.priority;
  return accelrtSuccess;
}

accelrtError_t accelrtStreamQuery(accelrtStream_t stream) {
  StreamInfo info;
  // A valid stream is always idle, so the answer is Success rather than NotReady.
  const accelrtError_t err = lookup_stream(stream, &info);
  if (err != accelrtSuccess)
    return err;
  return injected_fault(accelrtFaultStreamEvent);
}

accelrtError_t accelrtStreamSynchronize(accelrtStream_t stream) {
  StreamInfo info;
  const accelrtError_t err = lookup_stream(stream, &info);
  if (err != accelrtSuccess)
    return err;
  return injected_fault(accelrtFaultStreamEvent);
}

accelrtError_t accelrtStreamWaitEvent(accelrtStream_t stream, accelrtEvent_t event, unsigned int flags) {
  if (flags != 0)
    return accelrtErrorInvalidValue;
  StreamInfo info;
  const accelrtError_t err = lookup_stream(stream, &info);
  if (err != accelrtSuccess)
    return err;
  // The event is complete (or was never recorded), so there is nothing to wait for.
  const accelrtError_t event_err = validate_event(event);
  if (event_err != accelrtSuccess)
    return event_err;
  return injected_fault(accelrtFaultStreamEvent);
}

accelrtError_t accelrtDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (leastPriority != nullptr)
    *leastPriority = kLeastPriority;
  if (greatestPriority != nullptr)
    *greatestPriority = kGreatestPriority;
  return accelrtSuccess;
}

accelrtError_t accelrtLaunchHostFunc(accelrtStream_t stream, accelrtHostFn_t fn, void* userData) {
  if (fn == nullptr)
    return accelrtErrorInvalidValue;
  StreamInfo info;
  const accelrtError_t err = lookup_stream(stream, &info);
  if (err != accelrtSuccess)
    return err;
  if (const accelrtError_t fault = injected_fault(accelrtFaultStreamEvent); fault != accelrtSuccess)
    return fault;
  fn(userData);
  return accelrtSuccess;
}

} // extern "C"
