#include <csrc/runtime/host/HostMemoryLedger.h>

#include <c10/core/AllocatorConfig.h>
#include <c10/util/ApproximateClock.h>

#include <algorithm>

namespace torch_accel {

using c10::CachingDeviceAllocator::RecordContext;

namespace {

// The pool CUDA's caching allocator would serve an allocation of `size`
// from, so that memory_summary's pool rows mean the same on both runtimes.
size_t poolOf(size_t size) {
  return static_cast<size_t>(
      size <= c10::CachingAllocator::kSmallSize ? c10::CachingAllocator::StatType::SMALL_POOL
                                                : c10::CachingAllocator::StatType::LARGE_POOL);
}

constexpr size_t kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

// Calls `fn` on every c10::CachingAllocator::Stat of `stats` (each pool's, and
// the oversize ones): what resetting peaks or accumulated counts goes over.
template <typename Fn> void forEachStat(c10::CachingDeviceAllocator::DeviceStats& stats, Fn fn) {
  for (auto* pools :
       {&stats.allocation,
        &stats.segment,
        &stats.active,
        &stats.inactive_split,
        &stats.allocated_bytes,
        &stats.reserved_bytes,
        &stats.active_bytes,
        &stats.inactive_split_bytes,
        &stats.requested_bytes}) {
    for (auto& stat : *pools) {
      fn(stat);
    }
  }
  fn(stats.oversize_allocations);
  fn(stats.oversize_segments);
}

// forEachStat for the ledger's block statistics.
template <typename BlockStats, typename Fn> void forEachBlockStat(BlockStats& stats, Fn fn) {
  for (auto* pools : {&stats.count, &stats.bytes}) {
    for (auto& stat : *pools) {
      fn(stat);
    }
  }
}

} // namespace

HostMemoryLedger::HostMemoryLedger() {
  for (auto& fraction : fractions_) {
    fraction.store(1.0, std::memory_order_relaxed);
  }
}

HostMemoryLedger::Context HostMemoryLedger::contextForAllocation() const {
  if (record_context_.load(std::memory_order_relaxed) < RecordContext::STATE) {
    return nullptr;
  }
  const auto recorder = context_recorder_.load(std::memory_order_relaxed);
  return recorder != nullptr ? recorder() : nullptr;
}

HostMemoryLedger::Context HostMemoryLedger::contextForFree() const {
  if (record_context_.load(std::memory_order_relaxed) < RecordContext::ALL) {
    return nullptr;
  }
  const auto recorder = context_recorder_.load(std::memory_order_relaxed);
  return recorder != nullptr ? recorder() : nullptr;
}

bool HostMemoryLedger::reserve(c10::DeviceIndex device, size_t size, size_t allowed) {
  std::lock_guard<SpinMutex> lock(mutex_);
  const auto used = allocatedBytes(device) + reserved_[device];
  if (used > allowed || size > allowed - used) {
    return false;
  }
  reserved_[device] += size;
  return true;
}

void HostMemoryLedger::unreserve(c10::DeviceIndex device, size_t size) {
  std::lock_guard<SpinMutex> lock(mutex_);
  reserved_[device] -= size;
}

c10::DeviceIndex HostMemoryLedger::deviceOf(void* ptr) const {
  std::lock_guard<SpinMutex> lock(mutex_);
  const auto it = blocks_.find(ptr);
  return it == blocks_.end() ? c10::DeviceIndex(-1) : it->second.device;
}

size_t HostMemoryLedger::usedBytes(c10::DeviceIndex device) const {
  std::lock_guard<SpinMutex> lock(mutex_);
  return allocatedBytes(device) + reserved_[device];
}

void HostMemoryLedger::updateStats(c10::DeviceIndex device, size_t size, bool allocated) {
  auto& block_stats = block_stats_[device];
  const size_t pool = poolOf(size);
  if (allocated) {
    block_stats.count[kAggregate].increase(1);
    block_stats.count[pool].increase(1);
    block_stats.bytes[kAggregate].increase(size);
    block_stats.bytes[pool].increase(size);
    ++stats_[device].num_device_alloc;
  } else {
    block_stats.count[kAggregate].decrease(1);
    block_stats.count[pool].decrease(1);
    block_stats.bytes[kAggregate].decrease(size);
    block_stats.bytes[pool].decrease(size);
    ++stats_[device].num_device_free;
  }
}

size_t HostMemoryLedger::allocatedBytes(c10::DeviceIndex device) const {
  return static_cast<size_t>(block_stats_[device].bytes[kAggregate].current);
}

void HostMemoryLedger::recordAllocation(
    c10::DeviceIndex device, void* ptr, size_t size, void* stream, Context context, bool reserved) {
  std::lock_guard<SpinMutex> lock(mutex_);
  if (reserved) {
    reserved_[device] -= size;
  }
  updateStats(device, size, /*allocated=*/true);
  const auto addr = reinterpret_cast<size_t>(ptr);
  // What CUDA's allocator records when it has to map a new segment for an
  // allocation: here, every allocation.
  record(TraceEntry::SEGMENT_ALLOC, device, addr, size, stream, context);
  record(TraceEntry::ALLOC, device, addr, size, stream, context);
  blocks_.emplace(ptr, Block{device, size, stream, std::move(context)});
}

bool HostMemoryLedger::recordFree(void* ptr, Context context) {
  std::lock_guard<SpinMutex> lock(mutex_);
  const auto it = blocks_.find(ptr);
  if (it == blocks_.end()) {
    return false;
  }
  const Block& block = it->second;
  updateStats(block.device, block.size, /*allocated=*/false);
  const auto addr = reinterpret_cast<size_t>(ptr);
  // Streams finish their work before returning, so the free completes at
  // once and the segment goes straight back to accelrt.
  record(TraceEntry::FREE_REQUESTED, block.device, addr, block.size, block.stream, context);
  record(TraceEntry::FREE_COMPLETED, block.device, addr, block.size, block.stream, context);
  record(TraceEntry::SEGMENT_FREE, block.device, addr, block.size, block.stream, context);
  blocks_.erase(it);
  return true;
}

void HostMemoryLedger::recordOutOfMemory(
    c10::DeviceIndex device, size_t size, size_t device_free, void* stream, Context context) {
  std::lock_guard<SpinMutex> lock(mutex_);
  ++stats_[device].num_ooms;
  // As CUDA's: an OOM entry's address field holds the device's free bytes.
  record(TraceEntry::OOM, device, device_free, size, stream, context);
}

void HostMemoryLedger::record(
    TraceEntry::Action action,
    c10::DeviceIndex device,
    size_t addr,
    size_t size,
    void* stream,
    const Context& context) {
  if (!recording_ || max_entries_ == 0 || skip_actions_.count(static_cast<int>(action)) != 0) {
    return;
  }
  // Trace entries keep contexts only when recording asks for them: frees
  // from RecordContext::ALL, allocations from ALLOC.
  const auto when = record_context_.load(std::memory_order_relaxed);
  const bool keep_context =
      action == TraceEntry::FREE_REQUESTED || action == TraceEntry::FREE_COMPLETED || action == TraceEntry::SEGMENT_FREE
          ? when >= RecordContext::ALL
          : when >= RecordContext::ALLOC;
  TraceEntry entry(
      action,
      device,
      addr,
      size,
      stream,
      /*mempool=*/{0, 0},
      c10::getApproximateTime(),
      keep_context ? context : nullptr);
  History& history = histories_[device];
  if (history.entries.size() < max_entries_) {
    history.entries.push_back(std::move(entry));
  } else {
    history.entries[history.oldest] = std::move(entry);
    history.oldest = (history.oldest + 1) % history.entries.size();
  }
}

std::vector<HostMemoryLedger::TraceEntry> HostMemoryLedger::History::inOrder() const {
  std::vector<TraceEntry> out(entries.begin() + static_cast<std::ptrdiff_t>(oldest), entries.end());
  out.insert(out.end(), entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(oldest));
  return out;
}

void HostMemoryLedger::setMemoryFraction(c10::DeviceIndex device, double fraction) {
  fractions_[device].store(fraction, std::memory_order_relaxed);
}

c10::CachingDeviceAllocator::DeviceStats HostMemoryLedger::stats(c10::DeviceIndex device) const {
  std::lock_guard<SpinMutex> lock(mutex_);
  auto stats = stats_[device];
  const auto& block_stats = block_stats_[device];
  stats.allocation = stats.segment = stats.active = block_stats.count;
  stats.allocated_bytes = stats.reserved_bytes = stats.active_bytes = stats.requested_bytes = block_stats.bytes;
  stats.max_split_size = static_cast<int64_t>(c10::CachingAllocator::AcceleratorAllocatorConfig::max_split_size());
  return stats;
}

void HostMemoryLedger::resetPeakStats(c10::DeviceIndex device) {
  std::lock_guard<SpinMutex> lock(mutex_);
  auto& stats = stats_[device];
  forEachStat(stats, [](c10::CachingAllocator::Stat& stat) { stat.reset_peak(); });
  forEachBlockStat(block_stats_[device], [](c10::CachingAllocator::Stat& stat) { stat.reset_peak(); });
}

void HostMemoryLedger::resetAccumulatedStats(c10::DeviceIndex device) {
  std::lock_guard<SpinMutex> lock(mutex_);
  auto& stats = stats_[device];
  forEachStat(stats, [](c10::CachingAllocator::Stat& stat) { stat.reset_accumulated(); });
  forEachBlockStat(block_stats_[device], [](c10::CachingAllocator::Stat& stat) { stat.reset_accumulated(); });
  stats.num_alloc_retries = 0;
  stats.num_ooms = 0;
  stats.num_sync_all_streams = 0;
  stats.num_device_alloc = 0;
  stats.num_device_free = 0;
}

void HostMemoryLedger::recordHistory(
    bool enabled,
    c10::CachingDeviceAllocator::CreateContextFn context_recorder,
    size_t max_entries,
    RecordContext when,
    bool clear_history,
    const std::vector<std::string>& skip_actions) {
  std::unordered_set<int> skip;
  for (const auto& name : skip_actions) {
    skip.insert(static_cast<int>(c10::CachingDeviceAllocator::parseTraceEntryAction(name)));
  }
  std::lock_guard<SpinMutex> lock(mutex_);
  recording_ = enabled;
  max_entries_ = enabled ? max_entries : 0;
  skip_actions_ = std::move(skip);
  context_recorder_.store(enabled ? context_recorder : nullptr, std::memory_order_relaxed);
  record_context_.store(enabled ? when : RecordContext::NEVER, std::memory_order_relaxed);
  for (auto& history : histories_) {
    if (!enabled || clear_history) {
      history = History();
    } else {
      // Keep the newest entries that fit the new limit, oldest first.
      auto entries = history.inOrder();
      if (entries.size() > max_entries) {
        entries.erase(entries.begin(), entries.end() - static_cast<std::ptrdiff_t>(max_entries));
      }
      history.entries = std::move(entries);
      history.oldest = 0;
    }
  }
}

MemorySnapshot HostMemoryLedger::snapshot(bool include_traces, c10::DeviceIndex device_count) {
  std::lock_guard<SpinMutex> lock(mutex_);
  MemorySnapshot out;
  out.segments.reserve(blocks_.size());
  for (const auto& [ptr, block] : blocks_) {
    c10::CachingDeviceAllocator::SegmentInfo segment;
    segment.device = block.device;
    segment.address = reinterpret_cast<size_t>(ptr);
    segment.total_size = segment.requested_size = segment.allocated_size = segment.active_size = block.size;
    segment.stream = block.stream;
    segment.is_large = poolOf(block.size) == static_cast<size_t>(c10::CachingAllocator::StatType::LARGE_POOL);
    segment.context_when_allocated = block.context;
    c10::CachingDeviceAllocator::BlockInfo info;
    info.size = info.requested_size = block.size;
    info.allocated = info.active = true;
    info.context_when_allocated = block.context;
    segment.blocks.push_back(std::move(info));
    out.segments.push_back(std::move(segment));
  }
  std::sort(out.segments.begin(), out.segments.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.device, a.address) < std::make_pair(b.device, b.address);
  });
  out.device_traces.resize(static_cast<size_t>(device_count));
  for (c10::DeviceIndex device = 0; device < device_count; ++device) {
    // As CUDA's allocator: a snapshot is itself an event of the history,
    // so that a trace can be lined up with the snapshots taken during it.
    record(TraceEntry::SNAPSHOT, device, 0, allocatedBytes(device), nullptr, nullptr);
    if (include_traces) {
      out.device_traces[static_cast<size_t>(device)] = histories_[device].inOrder();
    }
  }
  return out;
}

void HostMemoryLedger::attachOutOfMemoryObserver(OutOfMemoryObserver observer) {
  std::lock_guard<SpinMutex> lock(mutex_);
  observers_.push_back(std::move(observer));
}

std::vector<OutOfMemoryObserver> HostMemoryLedger::outOfMemoryObservers() const {
  std::lock_guard<SpinMutex> lock(mutex_);
  return observers_;
}

HostMemoryLedger& hostMemoryLedger() {
  static auto* ledger = new HostMemoryLedger();
  return *ledger;
}

} // namespace torch_accel
