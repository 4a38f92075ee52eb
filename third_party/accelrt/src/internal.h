// Internal declarations shared by the accelrt implementation files. Not installed.
#ifndef ACCELRT_SRC_INTERNAL_H_
#define ACCELRT_SRC_INTERNAL_H_

#include "accelrt/accelrt.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>

namespace accelrt {
namespace detail {

constexpr int kMaxDevices = 64;
constexpr int kDefaultDeviceCount = 2;
constexpr std::size_t kAlignment = 64;

// ---- device.cpp -------------------------------------------------------------------------------
// Returns the device count, fixing it (from ACCELRT_DEVICE_COUNT) on first use.
int device_count();
// NoDevice if the count is 0, InvalidDevice if device is out of range, else Success.
accelrtError_t validate_device(int device);
// Writes the calling thread's current device; NoDevice if the count is 0.
accelrtError_t current_device(int* device);

// ---- memory.cpp -------------------------------------------------------------------------------
// The memory limit of a (valid) device.
std::size_t device_memory_limit(int device);

// ---- stream.cpp -------------------------------------------------------------------------------
struct StreamInfo {
  int device = 0;
  int priority = 0;
  unsigned flags = 0;
  bool is_default = false;
};
// Resolves a stream handle (NULL = current device's default stream) into a copy of its state.
// InvalidResourceHandle if the handle is not live; NoDevice for NULL when the count is 0.
accelrtError_t lookup_stream(accelrtStream_t stream, StreamInfo* info);

// ---- event.cpp --------------------------------------------------------------------------------
// InvalidResourceHandle unless event is a live event handle.
accelrtError_t validate_event(accelrtEvent_t event);

// ---- fault.cpp --------------------------------------------------------------------------------
// Bit (1 << kind) is set while faults of that kind are armed.
extern std::atomic<unsigned> armed_fault_kinds;
// Counts an operation of an armed kind and returns its injected error, or Success.
accelrtError_t draw_fault(accelrtFaultKind kind);

// The error injected for an operation of `kind` (Success when none): one relaxed load and one
// predictable branch while nothing is armed.
inline accelrtError_t injected_fault(accelrtFaultKind kind) {
  if (__builtin_expect(armed_fault_kinds.load(std::memory_order_relaxed) == 0, 1))
    return accelrtSuccess;
  return draw_fault(kind);
}

// ---- handles ----------------------------------------------------------------------------------
// Handles are (id << 4) | tag with a process-wide, never reused id, so destroyed handles can never
// alias new objects and a stream handle is never a valid event handle (and vice versa).
enum class HandleTag : std::uintptr_t { kStream = 0x5, kEvent = 0xE };

inline std::uintptr_t new_handle(HandleTag tag) {
  static std::atomic<std::uintptr_t> next_id{1};
  const std::uintptr_t id = next_id.fetch_add(1, std::memory_order_relaxed);
  return (id << 4) | static_cast<std::uintptr_t>(tag);
}

// The integer value of an API enum argument. C callers may pass any int (legal in C), which is outside
// the C++ value range of the enum; copying the bytes avoids an enum-typed load of such a value
// (undefined behaviour in C++, reported by -fsanitize=enum).
template <typename Enum> int enum_value(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int), "API enums are int-sized");
  int result = 0;
  std::memcpy(&result, &value, sizeof(result));
  return result;
}

// A mutex for critical sections of a few dozen instructions taken on every allocation and free
// (memory.cpp): uncontended, locking and unlocking are one atomic exchange and one store, where a
// std::mutex costs two calls into the C library. A waiter yields its CPU between tries, so a
// holder that was preempted or does more work (draining the block cache) still makes progress.
class SpinMutex {
public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed))
        std::this_thread::yield();
    }
  }
  bool try_lock() noexcept {
    return !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept {
    locked_.store(false, std::memory_order_release);
  }

private:
  std::atomic<bool> locked_{false};
};

// Returns a reference to a lazily created object that is intentionally never destroyed, so the
// runtime keeps working from other objects' static destructors at process exit.
template <typename T> T& leaked_singleton() {
  static T* instance = new T();
  return *instance;
}

} // namespace detail
} // namespace accelrt

#endif // ACCELRT_SRC_INTERNAL_H_
