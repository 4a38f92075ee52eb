// On the host runtime the alias fallback runs PyTorch's CPU kernels on accel
// memory. A CPU kernel allocates its results with the CPU allocator; for the
// fallback to adopt a result as accel memory without copying it, that memory
// must come from accelrt. So the host runtime installs this allocator as the
// process's CPU allocator: on a thread inside the fallback it allocates
// accelrt memory of the current accel device (the fallback sets the device);
// everywhere else it forwards every call to the allocator it replaced.

#include <csrc/runtime/host/HostAllocator.h>
#include <csrc/runtime/host/HostTargetAllocator.h>

#include <accelrt/accelrt.h>

#include <c10/core/CPUAllocator.h>

#include <cstring>

namespace torch_accel {
namespace {

thread_local bool cpuAllocationsAreAccel = false;

// The allocator replaced at installation; never changes afterwards.
c10::Allocator* baseAllocator = nullptr;
c10::DeleterFnPtr baseRawDeleter = nullptr;

// raw_allocate/raw_deallocate pairs pass through a single deleter, which must
// free memory from either source.
void freeAccelrtOrBaseMemory(void* ptr) {
  // The ledger knows every allocation of allocateAccelrtMemory by its base
  // address, a pluggable allocator's (which accelrt does not know) included.
  if (accelrtMemoryDevice(ptr) >= 0) {
    freeAccelrtMemory(ptr);
  } else {
    baseRawDeleter(ptr);
  }
}

class HostTargetAllocator final : public c10::Allocator {
public:
  c10::DataPtr allocate(size_t nbytes) override {
    if (cpuAllocationsAreAccel) {
      // Named a CPU pointer: the CPU kernel filling it must see CPU memory.
      return allocateAccelrtMemory(nbytes, c10::Device(c10::DeviceType::CPU));
    }
    return baseAllocator->allocate(nbytes);
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return baseRawDeleter == nullptr ? nullptr : &freeAccelrtOrBaseMemory;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

// Called once, by hostTargetAllocator()'s static initialisation.
HostTargetAllocator* install() {
  static HostTargetAllocator allocator;
  baseAllocator = c10::GetCPUAllocator();
  baseRawDeleter = baseAllocator->raw_deleter();
  // A priority above the default allocator's; an allocator registered
  // later at a higher priority would win, and the fallback then copies
  // results instead of adopting them (see adoptTargetAllocation).
  c10::SetCPUAllocator(&allocator, /*priority=*/100);
  return &allocator;
}

} // namespace

c10::Allocator* hostTargetAllocator() {
  // The fallback asks on every call: after the first, this is one load.
  static c10::Allocator* const allocator = install();
  return allocator;
}

bool exchangeCpuAllocationsAreAccel(bool enabled) noexcept {
  if (enabled && !cpuAllocationsAreAccel) {
    hostTargetAllocator();
  }
  const bool previous = cpuAllocationsAreAccel;
  cpuAllocationsAreAccel = enabled;
  return previous;
}

} // namespace torch_accel
