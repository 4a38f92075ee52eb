// accel memory on the CUDA runtime is CUDA's caching allocator's memory.
//
// Allocations keep CUDA's deleter, so frees, record_stream, empty_cache and
// the memory statistics are exactly CUDA's; only the device recorded in the
// DataPtr changes from cuda:N to accel:N. Snapshots, history, out-of-memory
// observers and the memory fraction are the caching allocator's own too:
// accel:N is cuda:N, so its records need no translation.

#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/cuda/CudaAllocator.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

namespace torch_accel {
namespace {

class CudaAllocator final : public ObservableAllocator {
public:
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DataPtr data_ptr;
    try {
      data_ptr = cuda()->allocate(nbytes);
    } catch (const c10::OutOfMemoryError& e) {
      // CUDA's message names cuda:N; accel users need to see accel:N. c10's
      // current device, not cudaGetDevice: a guard that restored a device
      // without a context has set it in c10 only (c10::cuda::MaybeSetDevice).
      const int device = c10::cuda::current_device();
      TORCH_CHECK_WITH(
          OutOfMemoryError,
          false,
          "accel:",
          device,
          " (cuda:",
          device,
          ") out of memory: ",
          e.what_without_backtrace());
    }
    data_ptr.unsafe_set_device(c10::Device(kAccel, data_ptr.device().index()));
    return data_ptr;
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return cuda()->raw_deleter();
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    cuda()->copy_data(dest, src, count);
  }

  bool initialized() override {
    return cuda()->initialized();
  }

  void emptyCache(c10::MempoolId_t mempool_id) override {
    cuda()->emptyCache(mempool_id);
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    cuda()->recordStream(
        ptr, c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::CUDA, stream.device_index()), stream.id()));
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    return cuda()->getDeviceStats(device);
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    cuda()->resetAccumulatedStats(device);
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    cuda()->resetPeakStats(device);
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    return cuda()->getMemoryInfo(device);
  }

  void recordHistory(
      bool enabled,
      c10::CachingDeviceAllocator::CreateContextFn context_recorder,
      size_t max_entries,
      c10::CachingDeviceAllocator::RecordContext when,
      bool clear_history,
      const std::vector<std::string>& skip_actions) override {
    cuda()->recordHistory(enabled, context_recorder, max_entries, when, clear_history, skip_actions);
  }

  MemorySnapshot snapshot(bool include_traces, c10::MempoolId_t pool) override {
    auto cuda_snapshot = cuda()->snapshot(pool, include_traces);
    return MemorySnapshot{std::move(cuda_snapshot.segments), std::move(cuda_snapshot.device_traces)};
  }

  void attachOutOfMemoryObserver(OutOfMemoryObserver observer) override {
    cuda()->attachOutOfMemoryObserver(std::move(observer));
  }

  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
    cuda()->setMemoryFraction(fraction, device);
  }

  double getMemoryFraction(c10::DeviceIndex device) override {
    return cuda()->getMemoryFraction(device);
  }

private:
  static c10::cuda::CUDACachingAllocator::CUDAAllocator* cuda() {
    return c10::cuda::CUDACachingAllocator::get();
  }
};

} // namespace

ObservableAllocator* cudaAllocator() {
  static CudaAllocator instance;
  return &instance;
}

} // namespace torch_accel
