// Memory: device and pinned-host allocations, limits, statistics, pointer attributes, copies.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

#include <unistd.h>

#include "internal.h"

namespace accelrt {
namespace detail {
namespace {

// Used when the physical memory size cannot be determined.
constexpr std::size_t kFallbackMemoryLimit = std::size_t{16} << 30;

std::size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0)
    return kFallbackMemoryLimit;
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_size);
}

struct Allocation {
  std::size_t size;
  accelrtMemoryType type; // accelrtMemoryTypeDevice or accelrtMemoryTypeHost
  int device;             // -1 for host allocations
};

// Freed device allocations keep their host memory for the next allocation of the same size class,
// without going through the host allocator: every tensor allocates, and a program allocates and
// frees the same sizes at the same pace. Allocations up to kMaxCachedBlock bytes are made in size
// classes of kAlignment bytes; at most kMaxCachedBytes of freed memory is kept, in one free list per
// class threaded through the blocks themselves. The cache is host memory only: a cached block is
// no longer an allocation (device statistics, limits and pointer queries are as if it were freed).
// Under AddressSanitizer nothing is cached, so that a use after free is still reported.
#if defined(__SANITIZE_ADDRESS__)
#define ACCELRT_CACHE_FREED_BLOCKS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ACCELRT_CACHE_FREED_BLOCKS 0
#endif
#endif
#ifndef ACCELRT_CACHE_FREED_BLOCKS
#define ACCELRT_CACHE_FREED_BLOCKS 1
#endif

constexpr std::size_t kMaxCachedBlock = std::size_t{1} << 20;
constexpr std::size_t kMaxCachedBytes = std::size_t{32} << 20;

// The host bytes behind a device allocation of `size` bytes: its size class up to kMaxCachedBlock,
// else exactly `size`.
std::size_t block_size(std::size_t size) {
  if (size > kMaxCachedBlock)
    return size;
  return (size + kAlignment - 1) / kAlignment * kAlignment;
}

class BlockCache {
public:
  // A block of `bytes` (a block_size) left by a free, or nullptr. Caller holds the mutex.
  void* take(std::size_t bytes) {
    if (!ACCELRT_CACHE_FREED_BLOCKS || bytes > kMaxCachedBlock)
      return nullptr;
    FreeBlock*& head = heads_[bytes / kAlignment];
    FreeBlock* block = head;
    if (block != nullptr) {
      head = block->next;
      cached_bytes_ -= bytes;
    }
    return block;
  }

  // Keeps `memory` (a block of `bytes`) for a later take; false if it does not fit the cache (the
  // caller frees it). Caller holds the mutex.
  bool keep(void* memory, std::size_t bytes) {
    if (!ACCELRT_CACHE_FREED_BLOCKS || bytes > kMaxCachedBlock || bytes > kMaxCachedBytes - cached_bytes_)
      return false;
    FreeBlock*& head = heads_[bytes / kAlignment];
    head = new (memory) FreeBlock{head};
    cached_bytes_ += bytes;
    return true;
  }

  // Hands every cached block to `release` and empties the cache. Caller holds the mutex.
  template <typename Release> void drain(Release release) {
    if (cached_bytes_ == 0)
      return;
    for (FreeBlock*& head : heads_) {
      while (head != nullptr) {
        FreeBlock* block = head;
        head = block->next;
        release(block);
      }
    }
    cached_bytes_ = 0;
  }

  std::size_t cached_bytes() const {
    return cached_bytes_;
  }

private:
  struct FreeBlock {
    FreeBlock* next;
  };
  // heads_[n]: the free list of blocks of n * kAlignment bytes (n = 0 is never used).
  std::array<FreeBlock*, kMaxCachedBlock / kAlignment + 1> heads_{};
  std::size_t cached_bytes_ = 0;
};

struct DeviceMemory {
  std::size_t limit = 0;
  std::size_t allocated = 0; // live allocations
  std::size_t peak = 0;
  std::size_t count = 0;
};

struct MemoryState {
  MemoryState() {
    const std::size_t limit = physical_memory_bytes();
    for (DeviceMemory& d : devices)
      d.limit = limit;
  }
  using Allocations = std::map<std::uintptr_t, Allocation>;

  // Records `allocation` at `addr`, in a node that a free left behind when there is one. Caller
  // holds the mutex.
  void record(std::uintptr_t addr, const Allocation& allocation) {
    if (spare_count == 0) {
      allocations.emplace(addr, allocation);
      return;
    }
    Allocations::node_type node = std::move(spare_nodes[--spare_count]);
    node.key() = addr;
    node.mapped() = allocation;
    allocations.insert(std::move(node));
  }

  // Forgets the allocation at `it`, keeping its node for the next record. Caller holds the mutex.
  void forget(Allocations::const_iterator it) {
    Allocations::node_type node = allocations.extract(it);
    if (spare_count < spare_nodes.size())
      spare_nodes[spare_count++] = std::move(node);
  }

  SpinMutex mutex;
  // Live allocations (device and host) by base address; sizes are > 0, ranges never overlap.
  Allocations allocations;
  std::array<DeviceMemory, kMaxDevices> devices;
  // Map nodes of freed allocations, reused by the next ones: a program frees and allocates
  // memory at the same pace, and then records allocations without allocating host memory for
  // the bookkeeping (which would also interleave small blocks with the allocations themselves).
  std::array<Allocations::node_type, 16> spare_nodes;
  std::size_t spare_count = 0;
  // The host memory of freed device allocations, for the next ones.
  BlockCache cache;
};

MemoryState& state() {
  return leaked_singleton<MemoryState>();
}

std::uintptr_t address(const void* ptr) {
  return reinterpret_cast<std::uintptr_t>(ptr);
}

// The allocation containing addr, or allocations.end(). Caller holds the mutex.
std::map<std::uintptr_t, Allocation>::const_iterator find_containing(const MemoryState& s, std::uintptr_t addr) {
  auto it = s.allocations.upper_bound(addr);
  if (it == s.allocations.begin())
    return s.allocations.end();
  --it;
  if (addr - it->first < it->second.size)
    return it;
  return s.allocations.end();
}

// True if addr lies inside a live device allocation.
bool is_device_pointer(const void* ptr) {
  MemoryState& s = state();
  std::lock_guard<SpinMutex> lock(s.mutex);
  auto it = find_containing(s, address(ptr));
  return it != s.allocations.end() && it->second.type == accelrtMemoryTypeDevice;
}

// Success if [ptr, ptr + count) lies inside one live device allocation (count > 0).
accelrtError_t check_device_range(const void* ptr, std::size_t count) {
  MemoryState& s = state();
  std::lock_guard<SpinMutex> lock(s.mutex);
  const std::uintptr_t addr = address(ptr);
  auto it = find_containing(s, addr);
  if (it == s.allocations.end() || it->second.type != accelrtMemoryTypeDevice) {
    return accelrtErrorInvalidValue;
  }
  const std::size_t offset = addr - it->first;
  if (count > it->second.size - offset)
    return accelrtErrorInvalidValue;
  return accelrtSuccess;
}

void* aligned_allocate(std::size_t size) {
  void* ptr = nullptr;
  if (posix_memalign(&ptr, kAlignment, size) != 0)
    return nullptr;
  return ptr;
}

// Validates and performs a copy; the caller has validated the stream, if any. kind_value is the
// integer value of the accelrtMemcpyKind argument (any int from a C caller).
accelrtError_t copy(void* dst, const void* src, std::size_t count, int kind_value) {
  if (kind_value < accelrtMemcpyHostToHost || kind_value > accelrtMemcpyDefault) {
    return accelrtErrorInvalidValue;
  }
  if (count == 0)
    return accelrtSuccess;
  if (dst == nullptr || src == nullptr)
    return accelrtErrorInvalidValue;
  bool dst_on_device = false;
  bool src_on_device = false;
  switch (kind_value) {
  case accelrtMemcpyHostToDevice:
    dst_on_device = true;
    break;
  case accelrtMemcpyDeviceToHost:
    src_on_device = true;
    break;
  case accelrtMemcpyDeviceToDevice:
    dst_on_device = src_on_device = true;
    break;
  case accelrtMemcpyDefault:
    dst_on_device = is_device_pointer(dst);
    src_on_device = is_device_pointer(src);
    break;
  default: // accelrtMemcpyHostToHost
    break;
  }
  if (dst_on_device) {
    const accelrtError_t err = check_device_range(dst, count);
    if (err != accelrtSuccess)
      return err;
  }
  if (src_on_device) {
    const accelrtError_t err = check_device_range(src, count);
    if (err != accelrtSuccess)
      return err;
  }
  if (const accelrtError_t fault = injected_fault(accelrtFaultCopy); fault != accelrtSuccess)
    return fault;
  // The copy itself runs outside the lock; freeing memory while copying it is a caller error.
  std::memmove(dst, src, count);
  return accelrtSuccess;
}

} // namespace

std::size_t device_memory_limit(int device) {
  MemoryState& s = state();
  std::lock_guard<SpinMutex> lock(s.mutex);
  return s.devices[static_cast<std::size_t>(device)].limit;
}

} // namespace detail
} // namespace accelrt

using namespace accelrt::detail;

extern "C" {

accelrtError_t accelrtDeviceSetMemoryLimit(int device, size_t bytes) {
  const accelrtError_t err = validate_device(device);
  if (err != accelrtSuccess)
    return err;
  MemoryState& s = state();
  std::lock_guard<SpinMutex> lock(s.mutex);
  s.devices[static_cast<std::size_t>(device)].limit = bytes;
  return accelrtSuccess;
}

accelrtError_t accelrtMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr)
    return accelrtErrorInvalidValue;
  int device = 0;
  const accelrtError_t err = current_device(&device);
  if (err != accelrtSuccess)
    return err;
  MemoryState& s = state();
  std::lock_guard<SpinMutex> lock(s.mutex);
  const DeviceMemory& d = s.devices[static_cast<std::size_t>(device)];
  *free_bytes = d.limit > d.allocated ? d.limit - d.allocated : 0;
  *total_bytes = d.limit;
  return accelrtSuccess;
}

accelrtError_t accelrtMemTrimCache(size_t* released_bytes) {
  MemoryState& s = state();
  std::size_t released = 0;
  {
    std::lock_guard<SpinMutex> lock(s.mutex);
    released = s.cache.cached_bytes();
    s.cache.drain([](void* block) { std::free(block); });
  }
  if (released_bytes != nullptr)
    *released_bytes = released;
  return accelrtSuccess;
}

accelrtError_t accelrtMalloc(void** ptr, size_t size) {
  if (ptr == nullptr)
    return accelrtErrorInvalidValue;
  *ptr = nullptr;
  int device = 0;
  const accelrtError_t err = current_device(&device);
  if (err != accelrtSuccess)
    return err;
  if (size == 0)
    return accelrtSuccess;
  if (const accelrtError_t fault = injected_fault(accelrtFaultAllocation); fault != accelrtSuccess)
    return fault;

  // The common case takes one lock: a block the cache holds is checked against the limit, taken
  // and recorded under it. Otherwise the host allocation runs outside the lock, and the limit is
  // checked and the allocation recorded under a second one (memory over the limit goes back).
  const std::size_t bytes = block_size(size);
  MemoryState& s = state();
  DeviceMemory& d = s.devices[static_cast<std::size_t>(device)];
  const auto fits = [&] { return d.allocated <= d.limit && size <= d.limit - d.allocated; };
  const auto commit = [&](void* memory) {
    s.record(address(memory), Allocation{size, accelrtMemoryTypeDevice, device});
    d.allocated += size;
    d.count += 1;
    d.peak = std::max(d.peak, d.allocated);
    *ptr = memory;
  };
  {
    std::lock_guard<SpinMutex> lock(s.mutex);
    if (!fits())
      return accelrtErrorMemoryAllocation;
    if (void* memory = s.cache.take(bytes)) {
      commit(memory);
      return accelrtSuccess;
    }
  }
  void* memory = aligned_allocate(bytes);
  if (memory == nullptr) {
    // The host is out of memory: give it the cache back and try once more.
    {
      std::lock_guard<SpinMutex> lock(s.mutex);
      s.cache.drain([](void* block) { std::free(block); });
    }
    memory = aligned_allocate(bytes);
    if (memory == nullptr)
      return accelrtErrorMemoryAllocation;
  }
  {
    std::lock_guard<SpinMutex> lock(s.mutex);
    if (fits()) {
      commit(memory);
      return accelrtSuccess;
    }
  }
  std::free(memory);
  return accelrtErrorMemoryAllocation;
}

accelrtError_t accelrtFree(void* ptr) {
  if (ptr == nullptr)
    return accelrtSuccess;
  MemoryState& s = state();
  {
    std::lock_guard<SpinMutex> lock(s.mutex);
    auto it = s.allocations.find(address(ptr));
    if (it == s.allocations.end() || it->second.type != accelrtMemoryTypeDevice) {
      return accelrtErrorInvalidValue;
    }
    DeviceMemory& d = s.devices[static_cast<std::size_t>(it->second.device)];
    d.allocated -= it->second.size;
    d.count -= 1;
    const std::size_t bytes = block_size(it->second.size);
    s.forget(it);
    if (s.cache.keep(ptr, bytes))
      return accelrtSuccess;
  }
  std::free(ptr);
  return accelrtSuccess;
}

accelrtError_t accelrtMallocHost(void** ptr, size_t size) {
  if (ptr == nullptr)
    return accelrtErrorInvalidValue;
  *ptr = nullptr;
  if (size == 0)
    return accelrtSuccess;
  void* memory = aligned_allocate(size);
  if (memory == nullptr)
    return accelrtErrorMemoryAllocation;
  MemoryState& s = state();
  std::lock_guard<SpinMutex> lock(s.mutex);
  s.record(address(memory), Allocation{size, accelrtMemoryTypeHost, -1});
  *ptr = memory;
  return accelrtSuccess;
}

accelrtError_t accelrtFreeHost(void* ptr) {
  if (ptr == nullptr)
    return accelrtSuccess;
  MemoryState& s = state();
  {
    std::lock_guard<SpinMutex> lock(s.mutex);
    auto it = s.allocations.find(address(ptr));
    if (it == s.allocations.end() || it->second.type != accelrtMemoryTypeHost) {
      return accelrtErrorInvalidValue;
    }
    s.forget(it);
  }
  std::free(ptr);
  return accelrtSuccess;
}

accelrtError_t accelrtPointerGetAttributes(accelrtPointerAttributes* attributes, const void* ptr) {
  if (attributes == nullptr)
    return accelrtErrorInvalidValue;
  attributes->type = accelrtMemoryTypeUnregistered;
  attributes->device = -1;
  attributes->basePointer = nullptr;
  attributes->size = 0;
  if (ptr == nullptr)
    return accelrtSuccess;
  MemoryState& s = state();
  std::lock_guard<SpinMutex> lock(s.mutex);
  auto it = find_containing(s, address(ptr));
  if (it == s.allocations.end())
    return accelrtSuccess;
  attributes->type = it->second.type;
  attributes->device = it->second.device;
  attributes->basePointer = reinterpret_cast<void*>(it->first);
  attributes->size = it->second.size;
  return accelrtSuccess;
}

accelrtError_t accelrtDeviceGetMemoryStats(int device, accelrtMemoryStats* stats) {
  if (stats == nullptr)
    return accelrtErrorInvalidValue;
  const accelrtError_t err = validate_device(device);
  if (err != accelrtSuccess)
    return err;
  MemoryState& s = state();
  std::lock_guard<SpinMutex> lock(s.mutex);
  const DeviceMemory& d = s.devices[static_cast<std::size_t>(device)];
  stats->allocatedBytes = d.allocated;
  stats->peakAllocatedBytes = d.peak;
  stats->allocationCount = d.count;
  return accelrtSuccess;
}

accelrtError_t accelrtDeviceResetPeakMemoryStats(int device) {
  const accelrtError_t err = validate_device(device);
  if (err != accelrtSuccess)
    return err;
  MemoryState& s = state();
  std::lock_guard<SpinMutex> lock(s.mutex);
  DeviceMemory& d = s.devices[static_cast<std::size_t>(device)];
  d.peak = d.allocated;
  return accelrtSuccess;
}

accelrtError_t accelrtMemcpy(void* dst, const void* src, size_t count, accelrtMemcpyKind kind) {
  return copy(dst, src, count, enum_value(kind));
}

accelrtError_t
accelrtMemcpyAsync(void* dst, const void* src, size_t count, accelrtMemcpyKind kind, accelrtStream_t stream) {
  StreamInfo info;
  const accelrtError_t err = lookup_stream(stream, &info);
  if (err != accelrtSuccess)
    return err;
  return copy(dst, src, count, enum_value(kind));
}

accelrtError_t accelrtMemset(void* dst, int value, size_t count) {
  if (count == 0)
    return accelrtSuccess;
  if (dst == nullptr)
    return accelrtErrorInvalidValue;
  const accelrtError_t err = check_device_range(dst, count);
  if (err != accelrtSuccess)
    return err;
  if (const accelrtError_t fault = injected_fault(accelrtFaultCopy); fault != accelrtSuccess)
    return fault;
  std::memset(dst, static_cast<unsigned char>(value), count);
  return accelrtSuccess;
}

} // extern "C"
