#pragma once

// The host runtime's account of accel memory.
//
// accelrt allocates exactly the bytes it is asked for and the host allocator
// caches nothing outside memory pools, so every segment holds one block, of
// the segment's size. Outside pools a segment lives as long as its block is
// allocated, and reserved memory equals allocated memory. A memory pool
// (torch.accel.MemPool) keeps the segments of the allocations routed to it
// after they are freed (reserved, no longer allocated), for the pool's later
// allocations, until the cache is emptied (as CUDA's caching allocator keeps
// a private pool's blocks; the host runtime never splits a segment). The
// ledger keeps the segments, the pools and their routing, the statistics
// torch.accel.memory_stats reports, the per-process memory fraction of each
// device, the out-of-memory observers and, while recording, the history
// torch.accel.memory._snapshot returns, all in c10's records (as CUDA's
// caching allocator keeps them).

#include <csrc/runtime/ObservableAllocator.h>
#include <csrc/runtime/host/SpinMutex.h>

#include <c10/core/Allocator.h>
#include <c10/util/flat_hash_map.h>

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace torch_accel {

// Where the memory of a segment comes from when not from accelrt: a
// pluggable allocator's functions (torch.accel.memory.AccelPluggableAllocator),
// torch.cuda.memory.CUDAPluggableAllocator's signatures with accelrt streams.
struct HostSegmentSource {
  using AllocFn = void* (*)(ssize_t size, int device, void* stream);
  using FreeFn = void (*)(void* ptr, size_t size, int device, void* stream);
  AllocFn alloc;
  FreeFn free;
};

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

  // A new segment of `size` bytes at `ptr`, allocated at once (in `pool`,
  // {0, 0} for none; its memory from `source`, null for accelrt).
  void recordAllocation(
      c10::DeviceIndex device,
      void* ptr,
      size_t size,
      void* stream,
      Context context,
      bool reserved,
      c10::MempoolId_t pool = {0, 0},
      std::shared_ptr<const HostSegmentSource> source = nullptr);

  // What the free of an allocation asks of its caller.
  struct Freed {
    bool known = false;   // the ledger knew the allocation
    bool release = false; // its segment goes back (outside pools): free it
    size_t size = 0;
    c10::DeviceIndex device = -1;
    void* stream = nullptr;
    std::shared_ptr<const HostSegmentSource> source;
  };
  // Frees the allocation at `ptr` (its base address): a pool's segment stays
  // cached in the pool, any other is forgotten and to be released.
  Freed recordFree(void* ptr, Context context);

  // --- Memory pools ---------------------------------------------------------

  // Creates pool `id` on `device`, with one use, or takes one more use of it.
  // A new pool's segments come from `source` (null: accelrt).
  void
  createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t id, std::shared_ptr<const HostSegmentSource> source);
  // Gives one use of pool `id` back. A pool without uses keeps its cached
  // segments until the cache is emptied.
  void releasePool(c10::MempoolId_t id);
  int poolUseCount(c10::MempoolId_t id) const;
  bool hasPool(c10::MempoolId_t id) const;

  // Routes the allocations on `device` whose stream `filter` accepts to pool
  // `id` (which takes one more use) until endAllocateToPool. The newest
  // routing that accepts an allocation wins.
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id, std::function<bool(void*)> filter);
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id);

  // Whether any routing is active: one relaxed load on every allocation.
  bool routingActive() const noexcept {
    return routings_.load(std::memory_order_relaxed) != 0;
  }

  // The pool an allocation on `device` and `stream` is routed to ({0, 0}:
  // none) and where its new segments come from.
  std::pair<c10::MempoolId_t, std::shared_ptr<const HostSegmentSource>>
  poolFor(c10::DeviceIndex device, void* stream) const;

  // Allocates `size` bytes in a cached segment of pool `id` (the smallest
  // that holds them, of the same size class): its address, or null.
  void* allocateCached(c10::MempoolId_t id, size_t size, void* stream, Context context);

  struct ReleasedSegment {
    void* ptr;
    size_t size;
    c10::DeviceIndex device;
    void* stream;
    std::shared_ptr<const HostSegmentSource> source;
  };
  // Forgets the cached segments of pool `id` ({0, 0}: of every pool without
  // uses) and returns them, for the caller to free; a pool without uses or
  // segments is gone afterwards.
  std::vector<ReleasedSegment> releaseCachedSegments(c10::MempoolId_t id);
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
  // The segments of pool `pool` ({0, 0}: every segment).
  MemorySnapshot snapshot(bool include_traces, c10::DeviceIndex device_count, c10::MempoolId_t pool = {0, 0});

  void attachOutOfMemoryObserver(OutOfMemoryObserver observer);
  std::vector<OutOfMemoryObserver> outOfMemoryObservers() const;

private:
  // A segment and its one block.
  struct Block {
    c10::DeviceIndex device;
    size_t size;
    size_t requested; // 0 while cached in a pool
    void* stream;
    Context context;
    c10::MempoolId_t pool;
    std::shared_ptr<const HostSegmentSource> source;
    bool allocated;
  };

  struct Pool {
    c10::DeviceIndex device;
    int use_count;
    std::shared_ptr<const HostSegmentSource> source;
    size_t segments = 0;
    std::multimap<size_t, void*> cached; // free segments by size
  };

  struct Routing {
    c10::MempoolId_t pool;
    std::function<bool(void*)> filter;
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
      const Context& context,
      c10::MempoolId_t pool = {0, 0});
  // Counts a block of `size` bytes (`requested` of them asked for) as
  // allocated or freed, and its segment as allocated or released when
  // `segment`. Caller holds mutex_.
  void updateStats(c10::DeviceIndex device, size_t size, size_t requested, bool allocated, bool segment);
  // Frees the cached segment `it` of `pool`. Caller holds mutex_.
  ReleasedSegment releaseCached(Pool& pool, std::multimap<size_t, void*>::iterator it);

  // A block is always active while allocated (the host runtime's streams
  // finish their work before returning), so the block statistics of a
  // DeviceStats hold five series: allocated blocks (allocation, active) and
  // their bytes (allocated, active bytes), requested bytes, and segments
  // (segment) and their bytes (reserved bytes). The ledger keeps those five,
  // and stats() spreads them over the seven. Until the first memory pool,
  // every segment is one block allocated with the bytes requested, so the
  // last three series are the first two: only those are updated (a handful
  // of instructions per allocation and free), and the first pool copies them
  // into the other three, which are exact copies, peaks and totals included.
  struct BlockStats {
    c10::CachingAllocator::StatArray count;
    c10::CachingAllocator::StatArray bytes;
    c10::CachingAllocator::StatArray requested;
    c10::CachingAllocator::StatArray segments;
    c10::CachingAllocator::StatArray reserved;
  };
  // Caller holds mutex_.
  size_t reservedBytes(c10::DeviceIndex device) const;

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

  std::unordered_map<c10::MempoolId_t, Pool, c10::MempoolIdHash> pools_;
  // Whether a pool was ever created: from then on all five series are kept.
  bool pools_used_ = false;
  std::array<std::vector<Routing>, kMaxDevices> routings_by_device_;
  std::atomic<int> routings_{0};
};

// The process's ledger (never destroyed: frees may come during exit).
HostMemoryLedger& hostMemoryLedger();

} // namespace torch_accel
