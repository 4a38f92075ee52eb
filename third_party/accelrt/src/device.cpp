// Devices: count (fixed at first use), per-thread current device, properties, synchronization.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "internal.h"

namespace accelrt {
namespace detail {
namespace {

// -1 until the count is fixed; then the count, which never changes again.
std::atomic<int> g_device_count{-1};
// Serializes fixing the count (std::mutex has a constexpr constructor: no static-init order issue).
std::mutex g_device_count_mutex;
// The calling thread's current device.
thread_local int t_current_device = 0;

// ACCELRT_DEVICE_COUNT: decimal digits only, value in [0, kMaxDevices]; anything else -> default.
int device_count_from_environment() {
  const char* text = std::getenv("ACCELRT_DEVICE_COUNT");
  if (text == nullptr || *text == '\0')
    return kDefaultDeviceCount;
  int value = 0;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9')
      return kDefaultDeviceCount;
    value = value * 10 + (*p - '0');
    if (value > kMaxDevices)
      return kDefaultDeviceCount;
  }
  return value;
}

} // namespace

int device_count() {
  int count = g_device_count.load(std::memory_order_acquire);
  if (count >= 0)
    return count;
  std::lock_guard<std::mutex> lock(g_device_count_mutex);
  count = g_device_count.load(std::memory_order_acquire);
  if (count < 0) {
    count = device_count_from_environment();
    g_device_count.store(count, std::memory_order_release);
  }
  return count;
}

accelrtError_t validate_device(int device) {
  const int count = device_count();
  if (count == 0)
    return accelrtErrorNoDevice;
  if (device < 0 || device >= count)
    return accelrtErrorInvalidDevice;
  return accelrtSuccess;
}

accelrtError_t current_device(int* device) {
  if (device_count() == 0)
    return accelrtErrorNoDevice;
  *device = t_current_device;
  return accelrtSuccess;
}

} // namespace detail
} // namespace accelrt

using namespace accelrt::detail;

extern "C" {

accelrtError_t accelrtSetDeviceCount(int count) {
  if (count < 0 || count > kMaxDevices)
    return accelrtErrorInvalidValue;
  std::lock_guard<std::mutex> lock(g_device_count_mutex);
  if (g_device_count.load(std::memory_order_acquire) >= 0)
    return accelrtErrorAlreadyInitialized;
  g_device_count.store(count, std::memory_order_release);
  return accelrtSuccess;
}

accelrtError_t accelrtGetDeviceCount(int* count) {
  if (count == nullptr)
    return accelrtErrorInvalidValue;
  *count = device_count();
  return accelrtSuccess;
}

accelrtError_t accelrtGetDevice(int* device) {
  if (device == nullptr)
    return accelrtErrorInvalidValue;
  return current_device(device);
}

accelrtError_t accelrtSetDevice(int device) {
  const accelrtError_t err = validate_device(device);
  if (err != accelrtSuccess)
    return err;
  t_current_device = device;
  return accelrtSuccess;
}

accelrtError_t accelrtDeviceSynchronize(void) {
  int device = 0;
  // Every stream is idle (work completes before the enqueueing call returns).
  const accelrtError_t err = current_device(&device);
  if (err != accelrtSuccess)
    return err;
  return injected_fault(accelrtFaultStreamEvent);
}

accelrtError_t accelrtGetDeviceProperties(accelrtDeviceProp* prop, int device) {
  if (prop == nullptr)
    return accelrtErrorInvalidValue;
  const accelrtError_t err = validate_device(device);
  if (err != accelrtSuccess)
    return err;
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "accelrt host device %d", device);
  prop->totalGlobalMem = device_memory_limit(device);
  prop->major = 1;
  prop->minor = 0;
  prop->multiProcessorCount = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  prop->warpSize = 1;
  prop->maxThreadsPerBlock = 1;
  return accelrtSuccess;
}

} // extern "C"
