// The allocator registered for PrivateUse1.
//
// Registered at load time, before a runtime is selected, so it forwards to
// the selected runtime's allocator. torch.accel.memory_* and
// torch.accelerator's memory functions reach the runtime through it.

#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/Runtime.h>

#include <c10/core/Allocator.h>

namespace torch_accel {
namespace {

class AccelAllocator final : public c10::DeviceAllocator {
public:
  c10::DataPtr allocate(size_t nbytes) override {
    checkNotInBadFork();
    return target()->allocate(nbytes);
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return target()->raw_deleter();
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    target()->copy_data(dest, src, count);
  }

  bool initialized() override {
    // Not before accel initialises, even if the target's allocator already
    // has (CUDA's, for torch.cuda's sake): see runtimeInitialized().
    return runtimeInitialized() && target()->initialized();
  }

  void emptyCache(c10::MempoolId_t mempool_id) override {
    target()->emptyCache(mempool_id);
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    target()->recordStream(ptr, stream);
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    checkDeviceIndex(device);
    return target()->getDeviceStats(device);
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    checkDeviceIndex(device);
    target()->resetAccumulatedStats(device);
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    checkDeviceIndex(device);
    target()->resetPeakStats(device);
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    checkDeviceIndex(device);
    return target()->getMemoryInfo(device);
  }

private:
  static c10::DeviceAllocator* target() {
    return runtime().allocator();
  }
};

AccelAllocator accel_allocator;

} // namespace
} // namespace torch_accel

REGISTER_ALLOCATOR(torch_accel::kAccel, &torch_accel::accel_allocator);
