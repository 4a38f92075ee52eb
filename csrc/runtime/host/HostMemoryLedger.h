#pragma once

// The host runtime's account of accel memory.
//
// accelrt allocates exactly the bytes it is asked for and the host allocator
// caches nothing, so every live allocation is one segment holding one
// allocated block, and reserved memory equals allocated memory. The ledger
// keeps those segments, the statistics torch.accel.memory_stats reports, the
// per-process memory fraction of each device, the out-of-memory observers
// and, while recording, the history torch.accel.memory._snapshot returns,
// all in c10's records (as CUDA's caching allocator keeps them).

#include <csrc/runtime/ObservableAllocator.h>
#include <csrc/runtime/host/SpinMutex.h>

#include <c10/core/Allocator.h>
#include <c10/util/flat_hash_map.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

namespace torch_accel {

class HostMemoryLedger {
public:
  using Context = std::shared_ptr<c10::GatheredContext>;
  using TraceEntry = c10::CachingDeviceAllocator::TraceEntry;

  static constexpr int kMaxDevices = 64; // accelrt's limit

  HostMemoryLedger();

  // The context to keep with an allocation / a free: nullptr unless history
  // recording asks for it. Called outside the ledger's lock, since gathering
  // Python frames takes the GIL.
  Context contextForAllocation() const;
  Context contextForFree() const;

  // Counts `size` bytes as being allocated on `device` unless the device's
  // usage would then exceed `allowed` bytes; returns whether it did. Each
  // successful reserve is followed by one recordAllocation (`reserved`) or
  // unreserve. Reserving is optional: recordAllocation without it counts
  // the bytes from then on.
  bool reserve(c10::DeviceIndex device, size_t size, size_t allowed);
  void unreserve(c10::DeviceIndex device, size_t size);

  void recordAllocation(c10::DeviceIndex device, void* ptr, size_t size, void* stream, Context context, bool reserved);
  // Forgets the allocation at `ptr` (its base address); false if unknown.
  bool recordFree(void* ptr, Context context);
  void recordOutOfMemory(c10::DeviceIndex device, size_t size, size_t device_free, void* stream, Context context);

  // The device of the live allocation at `ptr` (its base address); -1 if
  // unknown.
  c10::DeviceIndex deviceOf(void* ptr) const;

  // Bytes allocated on `device`, including reservations in flight.
  size_t usedBytes(c10::DeviceIndex device) const;

  void setMemoryFraction(c10::DeviceIndex device, double fraction);
  double memoryFraction(c10::DeviceIndex device) const {
    return fractions_[device].load(std::memory_order_relaxed);
  }

  c10::CachingDeviceAllocator::DeviceStats stats(c10::DeviceIndex device) const;
  void resetPeakStats(c10::DeviceIndex device);
  void resetAccumulatedStats(c10::DeviceIndex device);

  void recordHistory(
      bool enabled,
      c10::CachingDeviceAllocator::CreateContextFn context_recorder,
      size_t max_entries,
      c10::CachingDeviceAllocator::RecordContext when,
      bool clear_history,
      const std::vector<std::string>& skip_actions);
  MemorySnapshot snapshot(bool include_traces, c10::DeviceIndex device_count);

  void attachOutOfMemoryObserver(OutOfMemoryObserver observer);
  std::vector<OutOfMemoryObserver> outOfMemoryObservers() const;

private:
  struct Block {
    c10::DeviceIndex device;
    size_t size;
    void* stream;
    Context context;
  };

  // The newest entries of one device's history, at most max_entries_.
  struct History {
    std::vector<TraceEntry> entries; // a ring once full: oldest at `oldest`
    size_t oldest = 0;
    std::vector<TraceEntry> inOrder() const;
  };

  // Caller holds mutex_.
  void record(
      TraceEntry::Action action,
      c10::DeviceIndex device,
      size_t addr,
      size_t size,
      void* stream,
      const Context& context);
  void updateStats(c10::DeviceIndex device, size_t size, bool allocated);

  // Every live allocation is one segment holding one active, allocated
  // block of exactly the bytes requested, so the seven block statistics of
  // a DeviceStats (allocation, segment, active; allocated, reserved, active
  // and requested bytes) always hold the same two series: a count and a
  // byte total, per pool. The ledger keeps those two, which every
  // allocation and free update (a handful of instructions instead of
  // fourteen Stat updates), and stats() spreads them over the seven.
  struct BlockStats {
    c10::CachingAllocator::StatArray count;
    c10::CachingAllocator::StatArray bytes;
  };
  // Caller holds mutex_.
  size_t allocatedBytes(c10::DeviceIndex device) const;

  mutable SpinMutex mutex_;
  // Every live allocation by base address. An open-addressing table: once
  // it has grown to a program's working set, recording an allocation or a
  // free neither allocates memory nor chases a node.
  ska::flat_hash_map<void*, Block> blocks_;
  // The statistics other than the block statistics, kept in block_stats_.
  std::array<c10::CachingDeviceAllocator::DeviceStats, kMaxDevices> stats_{};
  std::array<BlockStats, kMaxDevices> block_stats_{};
  std::array<size_t, kMaxDevices> reserved_{};
  std::array<std::atomic<double>, kMaxDevices> fractions_{};

  std::atomic<c10::CachingDeviceAllocator::CreateContextFn> context_recorder_{nullptr};
  std::atomic<c10::CachingDeviceAllocator::RecordContext> record_context_{
      c10::CachingDeviceAllocator::RecordContext::NEVER};
  bool recording_ = false;
  size_t max_entries_ = 0;
  std::unordered_set<int> skip_actions_;
  std::array<History, kMaxDevices> histories_;

  std::vector<OutOfMemoryObserver> observers_;
};

// The process's ledger (never destroyed: frees may come during exit).
HostMemoryLedger& hostMemoryLedger();

} // namespace torch_accel
