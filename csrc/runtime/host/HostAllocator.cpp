// accel memory on the host runtime: accelrt allocations, one per tensor
// storage, with no cache outside memory pools (a pool keeps its freed
// segments for its later allocations: HostMemoryLedger.h). accelrt executes
// every stream operation before returning, so memory is never in use by a
// stream after its last owner drops it and record_stream has nothing to
// defer. Every allocation and free goes through HostMemoryLedger, which keeps
// the statistics, the snapshot and the history, the pools and their routing,
// and the memory fraction that caps each device.

#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/AccelTrace.h>
#include <csrc/runtime/Runtime.h>
#include <csrc/runtime/host/AccelrtCheck.h>
#include <csrc/runtime/host/HostAllocator.h>
#include <csrc/runtime/host/HostMemoryLedger.h>

#include <c10/core/Allocator.h>
#include <c10/core/AllocatorConfig.h>
#include <c10/util/Logging.h>

#include <atomic>
#include <cstdio>
#include <limits>
#include <string>
#include <tuple>

namespace torch_accel {
namespace {

// Where segments come from outside pools with a source of their own: null
// for accelrt (changeCurrentAllocator sets it before the first allocation).
std::shared_ptr<const HostSegmentSource> default_source;
std::atomic<bool> allocated_once{false};

void deleteAccelrtMemory(void* ptr) {
  freeAccelrtMemory(ptr);
}

c10::DeviceIndex currentDevice() {
  int device = 0;
  TORCH_ACCEL_ACCELRT_CHECK(accelrtGetDevice(&device));
  return static_cast<c10::DeviceIndex>(device);
}

// The accelrt stream current on `device`, recorded with its allocations as
// CUDA's allocator records the cudaStream_t (null: the default stream).
void* currentStream(c10::DeviceIndex device) {
  const Runtime& rt = runtime();
  return rt.getStreamNativeHandle(rt.getStream(c10::Device(kAccel, device)));
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

// Raises torch.OutOfMemoryError for `nbytes` on `device`, after recording
// the failure and calling the out-of-memory observers. `allowed` is what the
// memory fraction lets the process hold on the device (SIZE_MAX: no cap).
[[noreturn]] void
outOfMemory(c10::DeviceIndex device, size_t nbytes, size_t allowed, void* stream, HostMemoryLedger::Context context) {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  accelrtMemGetInfo(&free_bytes, &total_bytes);
  auto& ledger = hostMemoryLedger();
  ledger.recordOutOfMemory(device, nbytes, free_bytes, stream, std::move(context));
  const size_t used = ledger.usedBytes(device);
  const bool capped = allowed < total_bytes;
  c10::reportOutOfMemoryToProfiler(static_cast<int64_t>(nbytes), used, used, c10::Device(kAccel, device));
  // Outside the ledger's lock: an observer typically takes a snapshot.
  for (const auto& observer : ledger.outOfMemoryObservers()) {
    observer(device, nbytes, capped ? allowed : total_bytes, free_bytes);
  }
  std::string cap;
  if (capped) {
    cap = c10::str(
        ". This process may use at most ",
        formatBytes(allowed),
        " of it (set_per_process_memory_fraction(",
        ledger.memoryFraction(device),
        ")) and has ",
        formatBytes(used),
        " allocated");
  }
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
      " is free",
      cap,
      " (host runtime)");
}

// Warns once when the allocator settings ask for what accelrt cannot do.
void warnAboutUnsupportedSettings() {
  if (C10_UNLIKELY(c10::CachingAllocator::AcceleratorAllocatorConfig::use_expandable_segments())) {
    TORCH_WARN_ONCE("expandable_segments:True (PYTORCH_ALLOC_CONF) is not supported by accel's host runtime, whose "
                    "allocator maps every allocation separately and caches nothing; it is ignored");
  }
}

// allocateAccelrtMemory on `device`, the current accel device.
c10::DataPtr allocateOnCurrentDevice(size_t nbytes, c10::DeviceIndex device, c10::Device label) {
  if (nbytes == 0) {
    return c10::DataPtr(nullptr, nullptr, &deleteAccelrtMemory, label);
  }
  warnAboutUnsupportedSettings();
  auto& ledger = hostMemoryLedger();
  auto context = ledger.contextForAllocation();
  void* const stream = currentStream(device);
  c10::MempoolId_t pool{0, 0};
  std::shared_ptr<const HostSegmentSource> source;
  if (C10_UNLIKELY(default_source != nullptr)) {
    source = default_source; // copied only where set: a reference count is two atomic operations
  }
  if (C10_UNLIKELY(!allocated_once.load(std::memory_order_relaxed))) {
    allocated_once.store(true, std::memory_order_relaxed);
  }
  if (C10_UNLIKELY(ledger.routingActive())) {
    std::shared_ptr<const HostSegmentSource> pool_source;
    std::tie(pool, pool_source) = ledger.poolFor(device, stream);
    if (pool != c10::MempoolId_t{0, 0}) {
      if (void* ptr = ledger.allocateCached(pool, nbytes, stream, context)) {
        return c10::DataPtr(ptr, ptr, &deleteAccelrtMemory, label);
      }
      if (pool_source != nullptr) {
        source = std::move(pool_source);
      }
    }
  }
  size_t allowed = std::numeric_limits<size_t>::max();
  // Only a device capped by a memory fraction reserves its bytes in the
  // ledger before accelrt allocates them (so that allocations racing on
  // other threads see them); without a cap accelrt's own limit is the
  // only one, and the ledger is told once, afterwards.
  const bool capped = ledger.memoryFraction(device) < 1.0;
  if (capped) {
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    TORCH_ACCEL_ACCELRT_CHECK(accelrtMemGetInfo(&free_bytes, &total_bytes));
    allowed = static_cast<size_t>(ledger.memoryFraction(device) * static_cast<double>(total_bytes));
    if (!ledger.reserve(device, nbytes, allowed)) {
      outOfMemory(device, nbytes, allowed, stream, std::move(context));
    }
  }
  void* ptr = nullptr;
  accelrtError_t err = accelrtSuccess;
  if (source != nullptr) {
    // A pluggable allocator's memory: host memory, as the CPU's kernels need.
    ptr = source->alloc(static_cast<ssize_t>(nbytes), device, stream);
    err = ptr != nullptr ? accelrtSuccess : accelrtErrorMemoryAllocation;
  } else {
    err = accelrtMalloc(&ptr, nbytes);
  }
  if (err != accelrtSuccess) {
    if (capped) {
      ledger.unreserve(device, nbytes);
    }
    if (err == accelrtErrorMemoryAllocation) {
      outOfMemory(device, nbytes, allowed, stream, std::move(context));
    }
    throwAccelrtError(err, "accelrtMalloc(&ptr, nbytes)");
  }
  ledger.recordAllocation(
      device, ptr, nbytes, stream, std::move(context), /*reserved=*/capped, pool, std::move(source));
  trace::memoryAllocated(ptr);
  return c10::DataPtr(ptr, ptr, &deleteAccelrtMemory, label);
}

} // namespace

c10::DataPtr allocateAccelrtMemory(size_t nbytes, c10::Device label) {
  return allocateOnCurrentDevice(nbytes, currentDevice(), label);
}

void freeAccelrtMemory(void* ptr) noexcept {
  if (ptr == nullptr) {
    return;
  }
  // Reported before the memory goes back, for the same reason as below.
  trace::memoryFreed(ptr);
  auto& ledger = hostMemoryLedger();
  HostMemoryLedger::Freed freed;
  try {
    // Recorded before the memory goes back, so that an allocation reusing
    // the address cannot meet its previous record.
    freed = ledger.recordFree(ptr, ledger.contextForFree());
  } catch (const std::exception& e) {
    // Frees run in destructors: a failure to gather context must not throw.
    LOG(WARNING) << "accel: could not record the free of " << ptr << ": " << e.what();
    freed = ledger.recordFree(ptr, nullptr);
  }
  if (freed.known && !freed.release) {
    return; // cached in its memory pool
  }
  if (freed.source != nullptr) {
    freed.source->free(ptr, freed.size, freed.device, freed.stream);
    return;
  }
  // accelrtFree only fails for foreign pointers.
  accelrtFree(ptr);
}

void setDefaultSegmentSource(std::shared_ptr<const HostSegmentSource> source) {
  TORCH_CHECK(
      !allocated_once.load(),
      "accel: change_current_allocator() can only be called before accel memory is first allocated (the host "
      "runtime's allocator has already been used)");
  default_source = std::move(source);
}

namespace {

void emptyCachedSegments(c10::MempoolId_t pool) {
  for (const auto& segment : hostMemoryLedger().releaseCachedSegments(pool)) {
    if (segment.source != nullptr) {
      segment.source->free(segment.ptr, segment.size, segment.device, segment.stream);
    } else {
      accelrtFree(segment.ptr);
    }
  }
}

} // namespace

bool isAccelrtMemory(const c10::DataPtr& ptr) {
  return ptr.get_deleter() == &deleteAccelrtMemory;
}

c10::DeviceIndex accelrtMemoryDevice(void* ptr) {
  // The ledger knows every live allocation and its device: asking it takes
  // one lookup, where accelrtPointerGetAttributes searches an ordered map.
  return hostMemoryLedger().deviceOf(ptr);
}

namespace {

class HostAllocator final : public ObservableAllocator {
public:
  c10::DataPtr allocate(size_t nbytes) override {
    const auto device = currentDevice();
    return allocateOnCurrentDevice(nbytes, device, c10::Device(kAccel, device));
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &deleteAccelrtMemory;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    // accelrtMemcpyDefault: a pluggable allocator's memory is host memory
    // that accelrt does not know.
    TORCH_ACCEL_ACCELRT_CHECK(accelrtMemcpy(dest, src, count, accelrtMemcpyDefault));
  }

  bool initialized() override {
    return true;
  }

  void emptyCache(c10::MempoolId_t mempool_id) override {
    // The cached segments of memory pools: `mempool_id`'s, or ({0, 0}) those
    // of every pool without uses, as CUDA's allocator frees its private pools'.
    emptyCachedSegments(mempool_id);
    if (mempool_id == c10::MempoolId_t{0, 0}) {
      // Every other free goes straight back to accelrt, which keeps the host memory of small freed
      // blocks for reuse (no device memory: statistics count it as freed); empty_cache() hands that back.
      TORCH_ACCEL_ACCELRT_CHECK(accelrtMemTrimCache(nullptr));
    }
  }

  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {
    // Streams finish their work before returning (see the file comment).
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    return hostMemoryLedger().stats(device);
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    hostMemoryLedger().resetAccumulatedStats(device);
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    hostMemoryLedger().resetPeakStats(device);
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    int previous = 0;
    TORCH_ACCEL_ACCELRT_CHECK(accelrtGetDevice(&previous));
    TORCH_ACCEL_ACCELRT_CHECK(accelrtSetDevice(device));
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    const accelrtError_t err = accelrtMemGetInfo(&free_bytes, &total_bytes);
    TORCH_ACCEL_ACCELRT_CHECK(accelrtSetDevice(previous));
    if (err != accelrtSuccess) {
      throwAccelrtErrorOn(device, err, "accelrtMemGetInfo(&free_bytes, &total_bytes)");
    }
    return {free_bytes, total_bytes};
  }

  void recordHistory(
      bool enabled,
      c10::CachingDeviceAllocator::CreateContextFn context_recorder,
      size_t max_entries,
      c10::CachingDeviceAllocator::RecordContext when,
      bool clear_history,
      const std::vector<std::string>& skip_actions) override {
    hostMemoryLedger().recordHistory(enabled, context_recorder, max_entries, when, clear_history, skip_actions);
  }

  MemorySnapshot snapshot(bool include_traces, c10::MempoolId_t pool) override {
    return hostMemoryLedger().snapshot(include_traces, runtime().deviceCount(), pool);
  }

  void attachOutOfMemoryObserver(OutOfMemoryObserver observer) override {
    hostMemoryLedger().attachOutOfMemoryObserver(std::move(observer));
  }

  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
    TORCH_CHECK_VALUE(fraction >= 0.0 && fraction <= 1.0, "Invalid fraction value: ", fraction, ". Allowed range: 0~1");
    hostMemoryLedger().setMemoryFraction(device, fraction);
  }

  double getMemoryFraction(c10::DeviceIndex device) override {
    return hostMemoryLedger().memoryFraction(device);
  }
};

} // namespace

ObservableAllocator* hostAllocator() {
  static HostAllocator instance;
  return &instance;
}

} // namespace torch_accel
