// Pinned memory on the host runtime: accelrtMallocHost, the analogue of
// cudaHostAlloc. Host memory is always addressable by accelrt devices, so
// "pinned" here means what it means to PyTorch: the tensor reports
// is_pinned(), and accelrt tracks it as host memory rather than pageable.

#include <csrc/runtime/host/AccelrtCheck.h>
#include <csrc/runtime/host/HostPinnedAllocator.h>

#include <cstring>

namespace torch_accel {
namespace {

void freePinned(void* ptr) {
  accelrtFreeHost(ptr);
}

class HostPinnedAllocator final : public c10::Allocator {
public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nullptr;
    if (nbytes > 0) {
      TORCH_ACCEL_ACCELRT_CHECK(accelrtMallocHost(&ptr, nbytes));
    }
    return c10::DataPtr(ptr, ptr, &freePinned, c10::Device(c10::DeviceType::CPU));
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &freePinned;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

} // namespace

c10::Allocator* hostPinnedAllocator() {
  static HostPinnedAllocator instance;
  return &instance;
}

bool isHostPinnedPtr(const void* ptr) {
  accelrtPointerAttributes attributes{};
  return accelrtPointerGetAttributes(&attributes, ptr) == accelrtSuccess && attributes.type == accelrtMemoryTypeHost;
}

} // namespace torch_accel
