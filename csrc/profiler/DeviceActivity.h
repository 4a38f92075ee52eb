#pragma once

// Device activities: the accel kernels a Kineto trace shows on accel's rows.
//
// On runtimes whose kernels Kineto cannot see (the host runtime: accel's
// kernels are PyTorch's CPU kernels), torch_accel records them itself: the
// alias fallback and the copy kernel wrap each target kernel they run in a
// RecordDeviceActivity, which, while a trace is recording, times the kernel
// with DeviceTimingEvents on the current accel stream and links it to the
// innermost profiled operator (Kineto's correlation id), as CUPTI links a
// CUDA kernel to the operator that launched it. KinetoActivityProfiler turns
// the records into Kineto activities. When no trace records, a
// RecordDeviceActivity costs one relaxed atomic load.

#include <csrc/profiler/DeviceTimingEvent.h>

#include <c10/core/Device.h>
#include <c10/macros/Macros.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace torch_accel {

// One target kernel run for accel.
struct DeviceActivityRecord {
  std::string name;
  uint64_t correlation_id = 0; // of the innermost profiled operator; 0 if none
  int64_t start_ns = 0;        // host clock (ns since the epoch) when the kernel started
  std::unique_ptr<DeviceTimingEvent> start;
  std::unique_ptr<DeviceTimingEvent> end;
};

// The records of the trace being recorded. One trace records at a time
// (Kineto runs one at a time).
class DeviceActivityRecorder {
public:
  static DeviceActivityRecorder& instance() {
    static DeviceActivityRecorder recorder;
    return recorder;
  }

  bool recording() const noexcept {
    return recording_.load(std::memory_order_relaxed);
  }

  // Starts a new recording, dropping anything left, and returns its
  // generation (never 0); stop(generation) ends that recording, and does
  // nothing once a newer one has started.
  uint64_t start();
  void stop(uint64_t generation);

  // The operator correlation ids Kineto pushes and pops on each thread as
  // profiled operators begin and end.
  void pushCorrelationId(uint64_t id);
  void popCorrelationId();
  uint64_t currentCorrelationId() const;

  void add(DeviceActivityRecord record);

  // The records so far, in the order kernels ended; leaves none.
  std::vector<DeviceActivityRecord> take();

private:
  DeviceActivityRecorder() = default;

  std::atomic<bool> recording_{false};
  // Bumped by start(): per-thread correlation stacks left by an earlier
  // recording are recognised as stale and dropped.
  std::atomic<uint64_t> generation_{0};
  std::mutex mutex_;
  std::vector<DeviceActivityRecord> records_;
};

// Records the target kernel that runs during its lifetime, on the current
// stream of accel:`device`, as a device activity named "<operator> (<target>
// kernel)", e.g. "aten::mm (cpu kernel)". Never throws: a failure to record
// is reported once and the kernel goes unrecorded.
class RecordDeviceActivity {
public:
  RecordDeviceActivity(const std::string& operator_name, c10::DeviceIndex device) {
    if (C10_UNLIKELY(DeviceActivityRecorder::instance().recording())) {
      begin(operator_name, device);
    }
  }
  ~RecordDeviceActivity() {
    if (C10_UNLIKELY(record_ != nullptr)) {
      end();
    }
  }
  RecordDeviceActivity(const RecordDeviceActivity&) = delete;
  RecordDeviceActivity& operator=(const RecordDeviceActivity&) = delete;

private:
  void begin(const std::string& operator_name, c10::DeviceIndex device);
  void end() noexcept;

  std::unique_ptr<DeviceActivityRecord> record_;
};

} // namespace torch_accel
