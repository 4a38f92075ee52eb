// accel memory on the host runtime: accelrt allocations, one per tensor
// storage, with no cache. accelrt executes every stream operation before
// returning, so memory is never in use by a stream after its last owner
// drops it and record_stream has nothing to defer.

#include <csrc/runtime/host/AccelrtCheck.h>
#include <csrc/runtime/host/HostAllocator.h>

#include <c10/core/Allocator.h>

#include <cstring>

namespace torch_accel {
namespace {

void deleteAccelrtMemory(void* ptr) {
  // Deleters must not throw; accelrtFree only fails for foreign pointers.
  accelrtFree(ptr);
}

c10::DeviceIndex currentDevice() {
  int device = 0;
  TORCH_ACCEL_ACCELRT_CHECK(accelrtGetDevice(&device));
  return static_cast<c10::DeviceIndex>(device);
}

std::string formatBytes(size_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), unit == 0 ? "%.0f %s" : "%.2f %s", value, units[unit]);
  return buffer;
}

} // namespace

c10::DataPtr allocateAccelrtMemory(size_t nbytes, c10::Device label) {
  const auto device = currentDevice();
  void* ptr = nullptr;
  const accelrtError_t err = accelrtMalloc(&ptr, nbytes);
  if (err == accelrtErrorMemoryAllocation) {
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    accelrtMemGetInfo(&free_bytes, &total_bytes);
    TORCH_CHECK_WITH(
        OutOfMemoryError,
        false,
        "accel out of memory. Tried to allocate ",
        formatBytes(nbytes),
        " on accel:",
        static_cast<int>(device),
        ", which has ",
        formatBytes(total_bytes),
        " in total, of which ",
        formatBytes(free_bytes),
        " is free (host runtime)");
  }
  TORCH_ACCEL_ACCELRT_CHECK(err);
  return c10::DataPtr(ptr, ptr, &deleteAccelrtMemory, label);
}

bool isAccelrtMemory(const c10::DataPtr& ptr) {
  return ptr.get_deleter() == &deleteAccelrtMemory;
}

namespace {

class HostAllocator final : public c10::DeviceAllocator {
public:
  c10::DataPtr allocate(size_t nbytes) override {
    return allocateAccelrtMemory(nbytes, c10::Device(c10::DeviceType::PrivateUse1, currentDevice()));
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &deleteAccelrtMemory;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    TORCH_ACCEL_ACCELRT_CHECK(accelrtMemcpy(dest, src, count, accelrtMemcpyDeviceToDevice));
  }

  bool initialized() override {
    return true;
  }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    // Nothing is cached: every free goes straight back to accelrt.
  }

  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {
    // Streams finish their work before returning (see the file comment).
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    accelrtMemoryStats raw{};
    TORCH_ACCEL_ACCELRT_CHECK(accelrtDeviceGetMemoryStats(device, &raw));
    c10::CachingDeviceAllocator::DeviceStats stats;
    // Without a cache, allocated, reserved and active memory are the same.
    for (auto* stat : {&stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes, &stats.requested_bytes}) {
      auto& aggregate = (*stat)[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
      aggregate.current = static_cast<int64_t>(raw.allocatedBytes);
      aggregate.peak = static_cast<int64_t>(raw.peakAllocatedBytes);
    }
    for (auto* stat : {&stats.allocation, &stats.segment, &stats.active}) {
      (*stat)[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current =
          static_cast<int64_t>(raw.allocationCount);
    }
    return stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex /*device*/) override {
    // accelrt keeps no accumulated (allocated/freed totals) counters.
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    TORCH_ACCEL_ACCELRT_CHECK(accelrtDeviceResetPeakMemoryStats(device));
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    int previous = 0;
    TORCH_ACCEL_ACCELRT_CHECK(accelrtGetDevice(&previous));
    TORCH_ACCEL_ACCELRT_CHECK(accelrtSetDevice(device));
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    const accelrtError_t err = accelrtMemGetInfo(&free_bytes, &total_bytes);
    TORCH_ACCEL_ACCELRT_CHECK(accelrtSetDevice(previous));
    TORCH_ACCEL_ACCELRT_CHECK(err);
    return {free_bytes, total_bytes};
  }
};

} // namespace

c10::DeviceAllocator* hostAllocator() {
  static HostAllocator instance;
  return &instance;
}

} // namespace torch_accel
