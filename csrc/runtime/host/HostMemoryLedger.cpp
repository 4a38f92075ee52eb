#include <csrc/runtime/host/HostMemoryLedger.h>

#include <c10/core/AllocatorConfig.h>
#include <c10/util/ApproximateClock.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <string>

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
  for (auto* pools : {&stats.count, &stats.bytes, &stats.requested, &stats.segments, &stats.reserved}) {
    for (auto& stat : *pools) {
      fn(stat);
    }
  }
}

// How the ledger's errors name a pool: by its id, the pair torch.accel.MemPool.id
// shows, so that the message points at the pool the caller holds.
std::string poolName(c10::MempoolId_t id) {
  return c10::str("accel: memory pool (", id.first, ", ", id.second, ")");
}

// A pool's segments are one device's memory, so a pool serves only the device
// it was created on: a use from another device is refused, naming both.
void checkPoolDevice(c10::MempoolId_t id, c10::DeviceIndex pool_device, c10::DeviceIndex device) {
  TORCH_CHECK_VALUE(
      pool_device == device,
      poolName(id),
      " belongs to accel:",
      static_cast<int>(pool_device),
      " and cannot serve allocations on accel:",
      static_cast<int>(device));
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
  const auto used = reservedBytes(device) + reserved_[device];
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
  return reservedBytes(device) + reserved_[device];
}

void HostMemoryLedger::updateStats(
    c10::DeviceIndex device, size_t size, size_t requested, bool allocated, bool segment) {
  auto& block_stats = block_stats_[device];
  const size_t pool = poolOf(size);
  const auto update = [&](c10::CachingAllocator::StatArray& stat, size_t amount) {
    if (allocated) {
      stat[kAggregate].increase(amount);
      stat[pool].increase(amount);
    } else {
      stat[kAggregate].decrease(amount);
      stat[pool].decrease(amount);
    }
  };
  update(block_stats.count, 1);
  update(block_stats.bytes, size);
  if (segment) {
    ++(allocated ? stats_[device].num_device_alloc : stats_[device].num_device_free);
  }
  if (!pools_used_) {
    return; // the other three series are these two (see BlockStats)
  }
  update(block_stats.requested, requested);
  if (segment) {
    update(block_stats.segments, 1);
    update(block_stats.reserved, size);
  }
}

size_t HostMemoryLedger::reservedBytes(c10::DeviceIndex device) const {
  const auto& block_stats = block_stats_[device];
  return static_cast<size_t>((pools_used_ ? block_stats.reserved : block_stats.bytes)[kAggregate].current);
}

void HostMemoryLedger::recordAllocation(
    c10::DeviceIndex device,
    void* ptr,
    size_t size,
    void* stream,
    Context context,
    bool reserved,
    c10::MempoolId_t pool,
    std::shared_ptr<const HostSegmentSource> source) {
  std::lock_guard<SpinMutex> lock(mutex_);
  if (reserved) {
    reserved_[device] -= size;
  }
  updateStats(device, size, size, /*allocated=*/true, /*segment=*/true);
  const auto addr = reinterpret_cast<size_t>(ptr);
  // What CUDA's allocator records when it has to map a new segment for an
  // allocation: here, every allocation that no pool's cache serves.
  record(TraceEntry::SEGMENT_ALLOC, device, addr, size, stream, context, pool);
  record(TraceEntry::ALLOC, device, addr, size, stream, context, pool);
  if (pool != c10::MempoolId_t{0, 0}) {
    const auto it = pools_.find(pool);
    TORCH_INTERNAL_ASSERT(it != pools_.end(), "accel: an allocation routed to a memory pool that does not exist");
    ++it->second.segments;
  }
  blocks_.emplace(ptr, Block{device, size, size, stream, std::move(context), pool, std::move(source), true});
}

HostMemoryLedger::Freed HostMemoryLedger::recordFree(void* ptr, Context context) {
  std::lock_guard<SpinMutex> lock(mutex_);
  Freed freed;
  const auto it = blocks_.find(ptr);
  if (it == blocks_.end()) {
    return freed;
  }
  Block& block = it->second;
  freed.known = true;
  const bool in_pool = block.pool != c10::MempoolId_t{0, 0};
  updateStats(block.device, block.size, block.requested, /*allocated=*/false, /*segment=*/!in_pool);
  const auto addr = reinterpret_cast<size_t>(ptr);
  // Streams finish their work before returning, so the free completes at
  // once: outside a pool the segment goes straight back.
  record(TraceEntry::FREE_REQUESTED, block.device, addr, block.size, block.stream, context, block.pool);
  record(TraceEntry::FREE_COMPLETED, block.device, addr, block.size, block.stream, context, block.pool);
  if (in_pool) {
    block.allocated = false;
    block.requested = 0;
    block.context = nullptr;
    pools_.at(block.pool).cached.emplace(block.size, ptr);
    return freed;
  }
  record(TraceEntry::SEGMENT_FREE, block.device, addr, block.size, block.stream, context);
  freed.release = true;
  freed.size = block.size;
  freed.device = block.device;
  freed.stream = block.stream;
  freed.source = std::move(block.source);
  blocks_.erase(it);
  return freed;
}

void HostMemoryLedger::createOrIncrefPool(
    c10::DeviceIndex device, c10::MempoolId_t id, std::shared_ptr<const HostSegmentSource> source) {
  std::lock_guard<SpinMutex> lock(mutex_);
  if (!pools_used_) {
    // From now on segments and blocks differ: their series part (see BlockStats).
    for (auto& block_stats : block_stats_) {
      block_stats.requested = block_stats.reserved = block_stats.bytes;
      block_stats.segments = block_stats.count;
    }
    pools_used_ = true;
  }
  const auto it = pools_.find(id);
  if (it == pools_.end()) {
    pools_.emplace(id, Pool{device, 1, std::move(source)});
    return;
  }
  checkPoolDevice(id, it->second.device, device);
  ++it->second.use_count;
}

void HostMemoryLedger::releasePool(c10::MempoolId_t id) {
  std::lock_guard<SpinMutex> lock(mutex_);
  const auto it = pools_.find(id);
  TORCH_CHECK(it != pools_.end() && it->second.use_count > 0, poolName(id), " has no use to release");
  --it->second.use_count;
}

int HostMemoryLedger::poolUseCount(c10::MempoolId_t id) const {
  std::lock_guard<SpinMutex> lock(mutex_);
  const auto it = pools_.find(id);
  return it == pools_.end() ? 0 : it->second.use_count;
}

bool HostMemoryLedger::hasPool(c10::MempoolId_t id) const {
  std::lock_guard<SpinMutex> lock(mutex_);
  const auto it = pools_.find(id);
  return it != pools_.end() && it->second.use_count > 0;
}

void HostMemoryLedger::beginAllocateToPool(
    c10::DeviceIndex device, c10::MempoolId_t id, std::function<bool(void*)> filter) {
  std::lock_guard<SpinMutex> lock(mutex_);
  const auto it = pools_.find(id);
  TORCH_CHECK(
      it != pools_.end() && it->second.use_count > 0,
      poolName(id),
      " does not exist (or was released): allocations cannot be routed to it");
  checkPoolDevice(id, it->second.device, device);
  ++it->second.use_count;
  routings_by_device_[device].push_back(Routing{id, std::move(filter)});
  routings_.fetch_add(1, std::memory_order_relaxed);
}

void HostMemoryLedger::endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id) {
  std::lock_guard<SpinMutex> lock(mutex_);
  auto& routings = routings_by_device_[device];
  // The newest routing to the pool: routings nest.
  for (auto it = routings.rbegin(); it != routings.rend(); ++it) {
    if (it->pool == id) {
      routings.erase(std::next(it).base());
      routings_.fetch_sub(1, std::memory_order_relaxed);
      return;
    }
  }
  TORCH_CHECK(false, poolName(id), " has no allocations routed to it");
}

std::pair<c10::MempoolId_t, std::shared_ptr<const HostSegmentSource>>
HostMemoryLedger::poolFor(c10::DeviceIndex device, void* stream) const {
  std::lock_guard<SpinMutex> lock(mutex_);
  const auto& routings = routings_by_device_[device];
  for (auto it = routings.rbegin(); it != routings.rend(); ++it) {
    if (it->filter(stream)) {
      return {it->pool, pools_.at(it->pool).source};
    }
  }
  return {{0, 0}, nullptr};
}

void* HostMemoryLedger::allocateCached(c10::MempoolId_t id, size_t size, void* stream, Context context) {
  std::lock_guard<SpinMutex> lock(mutex_);
  auto& pool = pools_.at(id);
  // The smallest cached segment that holds `size` bytes, of the size class
  // CUDA's allocator would serve them from: a small allocation never takes
  // a large segment (nor the other way round).
  for (auto it = pool.cached.lower_bound(size); it != pool.cached.end(); ++it) {
    if (poolOf(it->first) != poolOf(size)) {
      break;
    }
    void* const ptr = it->second;
    Block& block = blocks_.at(ptr);
    pool.cached.erase(it);
    block.allocated = true;
    block.requested = size;
    block.stream = stream;
    updateStats(block.device, block.size, size, /*allocated=*/true, /*segment=*/false);
    record(TraceEntry::ALLOC, block.device, reinterpret_cast<size_t>(ptr), block.size, stream, context, id);
    block.context = std::move(context);
    return ptr;
  }
  return nullptr;
}

HostMemoryLedger::ReleasedSegment
HostMemoryLedger::releaseCached(Pool& pool, std::multimap<size_t, void*>::iterator it) {
  void* const ptr = it->second;
  pool.cached.erase(it);
  const auto block_it = blocks_.find(ptr);
  Block& block = block_it->second;
  ReleasedSegment released{ptr, block.size, block.device, block.stream, std::move(block.source)};
  auto& block_stats = block_stats_[block.device];
  const size_t size_class = poolOf(block.size);
  block_stats.segments[kAggregate].decrease(1);
  block_stats.segments[size_class].decrease(1);
  block_stats.reserved[kAggregate].decrease(block.size);
  block_stats.reserved[size_class].decrease(block.size);
  ++stats_[block.device].num_device_free;
  record(
      TraceEntry::SEGMENT_FREE,
      block.device,
      reinterpret_cast<size_t>(ptr),
      block.size,
      block.stream,
      nullptr,
      block.pool);
  --pool.segments;
  blocks_.erase(block_it);
  return released;
}

std::vector<HostMemoryLedger::ReleasedSegment> HostMemoryLedger::releaseCachedSegments(c10::MempoolId_t id) {
  std::lock_guard<SpinMutex> lock(mutex_);
  std::vector<ReleasedSegment> released;
  const bool every_unused_pool = id == c10::MempoolId_t{0, 0};
  for (auto it = pools_.begin(); it != pools_.end();) {
    Pool& pool = it->second;
    if (every_unused_pool ? pool.use_count == 0 : it->first == id) {
      while (!pool.cached.empty()) {
        released.push_back(releaseCached(pool, pool.cached.begin()));
      }
    }
    // A pool without uses is gone once its last segment is.
    it = pool.use_count == 0 && pool.segments == 0 ? pools_.erase(it) : std::next(it);
  }
  return released;
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
    const Context& context,
    c10::MempoolId_t pool) {
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
      action, device, addr, size, stream, pool, c10::getApproximateTime(), keep_context ? context : nullptr);
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
  stats.allocation = stats.active = block_stats.count;
  stats.allocated_bytes = stats.active_bytes = block_stats.bytes;
  stats.requested_bytes = pools_used_ ? block_stats.requested : block_stats.bytes;
  stats.segment = pools_used_ ? block_stats.segments : block_stats.count;
  stats.reserved_bytes = pools_used_ ? block_stats.reserved : block_stats.bytes;
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

MemorySnapshot HostMemoryLedger::snapshot(bool include_traces, c10::DeviceIndex device_count, c10::MempoolId_t pool) {
  std::lock_guard<SpinMutex> lock(mutex_);
  MemorySnapshot out;
  out.segments.reserve(blocks_.size());
  for (const auto& [ptr, block] : blocks_) {
    if (pool != c10::MempoolId_t{0, 0} && block.pool != pool) {
      continue;
    }
    c10::CachingDeviceAllocator::SegmentInfo segment;
    segment.device = block.device;
    segment.address = reinterpret_cast<size_t>(ptr);
    segment.total_size = block.size;
    segment.allocated_size = segment.active_size = block.allocated ? block.size : 0;
    segment.requested_size = block.requested;
    segment.stream = block.stream;
    segment.is_large = poolOf(block.size) == static_cast<size_t>(c10::CachingAllocator::StatType::LARGE_POOL);
    segment.owner_private_pool_id = block.pool;
    segment.context_when_allocated = block.context;
    c10::CachingDeviceAllocator::BlockInfo info;
    info.size = block.size;
    info.requested_size = block.requested;
    info.allocated = info.active = block.allocated;
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
    record(
        TraceEntry::SNAPSHOT,
        device,
        0,
        static_cast<size_t>(block_stats_[device].bytes[kAggregate].current),
        nullptr,
        nullptr);
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
