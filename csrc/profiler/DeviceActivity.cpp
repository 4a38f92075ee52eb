#include <csrc/profiler/DeviceActivity.h>
#include <csrc/runtime/Runtime.h>

#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>

#include <exception>
#include <utility>

namespace torch_accel {
namespace {

// The correlation ids of the profiled operators open on this thread,
// innermost last, for recording `generation`.
struct CorrelationStack {
  uint64_t generation = 0;
  std::vector<uint64_t> ids;
};

CorrelationStack& correlationStack(uint64_t generation) {
  thread_local CorrelationStack stack;
  if (stack.generation != generation) {
    stack.generation = generation;
    stack.ids.clear();
  }
  return stack;
}

void warnUnrecorded(const std::exception& e) noexcept {
  try {
    TORCH_WARN_ONCE("The profiler could not record an accel kernel, so the trace misses some: ", e.what());
  } catch (...) {
    // A warning handler that throws (warnings as errors) must not stop the kernel.
  }
}

} // namespace

uint64_t DeviceActivityRecorder::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  records_.clear();
  const uint64_t generation = generation_.fetch_add(1, std::memory_order_relaxed) + 1;
  recording_.store(true, std::memory_order_relaxed);
  return generation;
}

void DeviceActivityRecorder::stop(uint64_t generation) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (generation_.load(std::memory_order_relaxed) == generation) {
    recording_.store(false, std::memory_order_relaxed);
  }
}

void DeviceActivityRecorder::pushCorrelationId(uint64_t id) {
  correlationStack(generation_.load(std::memory_order_relaxed)).ids.push_back(id);
}

void DeviceActivityRecorder::popCorrelationId() {
  // An operator that began before this recording started ends without a
  // push of ours: nothing to pop.
  auto& ids = correlationStack(generation_.load(std::memory_order_relaxed)).ids;
  if (!ids.empty()) {
    ids.pop_back();
  }
}

uint64_t DeviceActivityRecorder::currentCorrelationId() const {
  const auto& ids = correlationStack(generation_.load(std::memory_order_relaxed)).ids;
  return ids.empty() ? 0 : ids.back();
}

void DeviceActivityRecorder::add(DeviceActivityRecord record) {
  std::lock_guard<std::mutex> lock(mutex_);
  records_.push_back(std::move(record));
}

std::vector<DeviceActivityRecord> DeviceActivityRecorder::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(records_, {});
}

void RecordDeviceActivity::begin(const std::string& operator_name, c10::DeviceIndex device) {
  try {
    auto record = std::make_unique<DeviceActivityRecord>();
    record->name = operator_name + " (" + c10::DeviceTypeName(runtime().targetType(), /*lower_case=*/true) + " kernel)";
    record->correlation_id = DeviceActivityRecorder::instance().currentCorrelationId();
    record->start_ns = c10::getTime();
    record->start = std::make_unique<DeviceTimingEvent>(device);
    record_ = std::move(record);
  } catch (const std::exception& e) {
    warnUnrecorded(e);
  }
}

void RecordDeviceActivity::end() noexcept {
  try {
    record_->end = std::make_unique<DeviceTimingEvent>(record_->start->device());
    DeviceActivityRecorder::instance().add(std::move(*record_));
  } catch (const std::exception& e) {
    warnUnrecorded(e);
  }
  record_.reset();
}

} // namespace torch_accel
