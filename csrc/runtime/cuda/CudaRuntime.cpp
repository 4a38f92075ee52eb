// The CUDA runtime: accel:N is cuda:N.
//
// Every device, stream and event operation is CUDA's own (c10::cuda's guard
// implementation); this file only translates between accel and CUDA names for
// the same objects. An accel stream id IS a CUDA stream id, so the current
// accel stream is the current CUDA stream and CUDA kernels launched for accel
// tensors run on it. Events are CUDA events.

#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/Runtime.h>
#include <csrc/runtime/cuda/CudaAllocator.h>
#include <csrc/runtime/cuda/CudaGraph.h>
#include <csrc/runtime/cuda/CudaSharedMemory.h>
#include <csrc/runtime/cuda/NvmlDeviceCount.h>

#include <ATen/Context.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/native/transformers/cuda/sdp_utils.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/impl/CUDAGuardImpl.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>

namespace torch_accel {

namespace {
// Set once accel (and so CUDA) is initialised; from then on counting devices
// through CUDA costs nothing more.
std::atomic<bool> cudaInitialized{false};
} // namespace

c10::DeviceIndex cudaDeviceCount() noexcept {
  if (!cudaInitialized.load(std::memory_order_acquire)) {
    // Counting through CUDA would initialise the driver, and a forked child
    // could then never use accel; count through NVML where it works.
    const int count = nvmlVisibleDeviceCount();
    if (count >= 0) {
      return static_cast<c10::DeviceIndex>(count);
    }
  }
  return c10::cuda::device_count();
}

namespace {

constexpr auto kCuda = c10::DeviceType::CUDA;

// A pluggable allocator on the CUDA runtime: torch.cuda's own
// (CUDAPluggableAllocator), since accel memory is CUDA's allocator's.
class CudaPluggableAllocator final : public PluggableAllocator {
public:
  explicit CudaPluggableAllocator(std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator> cuda)
      : cuda_(std::move(cuda)) {}
  const std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator>& cuda() const {
    return cuda_;
  }

private:
  std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator> cuda_;
};

std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator> cudaAllocatorOf(PluggableAllocator* allocator) {
  if (allocator == nullptr) {
    return nullptr;
  }
  auto* cuda = dynamic_cast<CudaPluggableAllocator*>(allocator);
  TORCH_CHECK_TYPE(cuda != nullptr, "accel (CUDA runtime): the allocator is not one of the CUDA runtime's");
  return cuda->cuda();
}

c10::Device toCuda(c10::Device device) {
  return c10::Device(kCuda, device.index());
}

c10::Device toAccel(c10::Device device) {
  return c10::Device(kAccel, device.index());
}

c10::Stream toCuda(const c10::Stream& stream) {
  return c10::Stream(c10::Stream::UNSAFE, toCuda(stream.device()), stream.id());
}

c10::Stream toAccel(const c10::Stream& stream) {
  return c10::Stream(c10::Stream::UNSAFE, toAccel(stream.device()), stream.id());
}

class CudaRuntime final : public Runtime {
public:
  const char* name() const noexcept override {
    return "cuda";
  }

  c10::DeviceType targetType() const noexcept override {
    return kCuda;
  }

  void init() const override {
    // Sets up CUDA's caching allocator, generators and the device state that
    // torch.cuda would; idempotent, so torch.cuda may initialise first.
    at::globalContext().lazyInitDevice(kCuda);
    cudaInitialized.store(true, std::memory_order_release);
  }

  c10::Device exchangeDevice(c10::Device device) const override {
    return toAccel(cuda_.exchangeDevice(toCuda(device)));
  }

  c10::Device getDevice() const override {
    return toAccel(cuda_.getDevice());
  }

  void setDevice(c10::Device device) const override {
    cuda_.setDevice(toCuda(device));
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    cuda_.uncheckedSetDevice(toCuda(device));
  }

  c10::Stream getStream(c10::Device device) const override {
    return toAccel(cuda_.getStream(toCuda(device)));
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return toAccel(cuda_.getDefaultStream(toCuda(device)));
  }

  c10::Stream getNewStream(c10::Device device, int priority) const override {
    return toAccel(cuda_.getNewStream(toCuda(device), priority));
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool isHighPriority) const override {
    return toAccel(cuda_.getStreamFromGlobalPool(toCuda(device), isHighPriority));
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    return toAccel(cuda_.exchangeStream(toCuda(stream)));
  }

  void* getStreamNativeHandle(const c10::Stream stream) const override {
    return cuda_.getStreamNativeHandle(toCuda(stream));
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return cudaDeviceCount();
  }

  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    // CUDA's kernels handle every scalar type; bfloat16 is native (rather
    // than emulated) from compute capability 8.0 on, as torch.cuda reports.
    c10::DeviceCapability capability;
    capability.capability_data.supported_scalar_types.has_BFloat16 =
        at::cuda::getDeviceProperties(device.index())->major >= 8;
    return capability;
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index, const c10::EventFlag flag)
      const override {
    cuda_.record(event, toCuda(stream), device_index, flag);
  }

  void block(void* event, const c10::Stream& stream) const override {
    cuda_.block(event, toCuda(stream));
  }

  bool queryEvent(void* event) const override {
    return cuda_.queryEvent(event);
  }

  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {
    cuda_.destroyEvent(event, device_index);
  }

  bool queryStream(const c10::Stream& stream) const override {
    return cuda_.queryStream(toCuda(stream));
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    cuda_.synchronizeStream(toCuda(stream));
  }

  void synchronizeEvent(void* event) const override {
    cuda_.synchronizeEvent(event);
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    cuda_.synchronizeDevice(device_index);
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    cuda_.recordDataPtrOnStream(data_ptr, toCuda(stream));
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex device_index) const override {
    return cuda_.elapsedTime(start, end, device_index);
  }

  bool hasPrimaryContext(c10::DeviceIndex device) const override {
    return c10::cuda::hasPrimaryContext(device);
  }

  DeviceProperties getDeviceProperties(c10::DeviceIndex device) const override {
    const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device);
    DeviceProperties out;
    out.name = prop->name;
    out.total_memory = prop->totalGlobalMem;
    out.major = prop->major;
    out.minor = prop->minor;
    out.multi_processor_count = prop->multiProcessorCount;
    out.warp_size = prop->warpSize;
    out.max_threads_per_block = prop->maxThreadsPerBlock;
    out.max_threads_per_multi_processor = prop->maxThreadsPerMultiProcessor;
    out.regs_per_multiprocessor = prop->regsPerMultiprocessor;
    out.shared_memory_per_block = prop->sharedMemPerBlock;
    out.shared_memory_per_multiprocessor = prop->sharedMemPerMultiprocessor;
    out.l2_cache_size = prop->l2CacheSize;
    char uuid[37];
    const auto* b = reinterpret_cast<const unsigned char*>(prop->uuid.bytes);
    std::snprintf(
        uuid,
        sizeof(uuid),
        "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
        b[0],
        b[1],
        b[2],
        b[3],
        b[4],
        b[5],
        b[6],
        b[7],
        b[8],
        b[9],
        b[10],
        b[11],
        b[12],
        b[13],
        b[14],
        b[15]);
    out.uuid = uuid;
    return out;
  }

  c10::Device getDeviceFromPtr(const void* ptr) const override {
    // As at::cuda::getDeviceFromPtr: device, managed and pinned host memory
    // (the device it was allocated against) are accepted; only memory CUDA
    // does not know is refused.
    cudaPointerAttributes attributes{};
    C10_CUDA_CHECK(cudaPointerGetAttributes(&attributes, ptr));
    TORCH_CHECK(
        attributes.type != cudaMemoryTypeUnregistered,
        "The pointer ",
        ptr,
        " resides on host memory and is not registered with any accel (CUDA) device");
    return c10::Device(kAccel, static_cast<c10::DeviceIndex>(attributes.device));
  }

  std::pair<int, int> streamPriorityRange() const override {
    // The range c10::cuda's stream pools serve (torch.cuda.Stream.priority_range()),
    // a subset of the device's: a priority beyond it gets the nearest pool.
    const auto [least, greatest] = c10::cuda::CUDAStream::priority_range();
    return {least, greatest};
  }

  int streamPriority(const c10::Stream& stream) const override {
    return c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, toCuda(stream)).priority();
  }

  ObservableAllocator* allocator() const override {
    return cudaAllocator();
  }

  // Memory pools are the caching allocator's private pools (accel:N is cuda:N).

  void createPool(
      c10::DeviceIndex device,
      c10::MempoolId_t id,
      const std::shared_ptr<PluggableAllocator>& allocator,
      bool use_on_oom,
      bool no_split) const override {
    namespace caching = c10::cuda::CUDACachingAllocator;
    TORCH_CHECK_VALUE(
        caching::getPoolUseCount(device, id) == 0,
        "accel: memory pool (",
        id.first,
        ", ",
        id.second,
        ") exists already");
    caching::createOrIncrefPool(device, id, cudaAllocatorOf(allocator.get()));
    if (use_on_oom) {
      caching::setUseOnOOM(device, id, true);
    }
    if (no_split) {
      caching::setNoSplit(device, id);
    }
  }

  void releasePool(c10::DeviceIndex device, c10::MempoolId_t id) const override {
    c10::cuda::CUDACachingAllocator::releasePool(device, id);
  }

  int poolUseCount(c10::DeviceIndex device, c10::MempoolId_t id) const override {
    return c10::cuda::CUDACachingAllocator::getPoolUseCount(device, id);
  }

  void beginAllocateCurrentThreadToPool(c10::DeviceIndex device, c10::MempoolId_t id) const override {
    const auto thread = std::this_thread::get_id();
    c10::cuda::CUDACachingAllocator::beginAllocateToPool(
        device, id, [thread](cudaStream_t) { return std::this_thread::get_id() == thread; });
  }

  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id) const override {
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device, id);
  }

  std::shared_ptr<PluggableAllocator> newPluggableAllocator(uintptr_t alloc_fn, uintptr_t free_fn) const override {
    using AllocFn = void* (*)(size_t, int, cudaStream_t);
    using FreeFn = void (*)(void*, size_t, int, cudaStream_t);
    return std::make_shared<CudaPluggableAllocator>(torch::cuda::CUDAPluggableAllocator::createCustomAllocator(
        reinterpret_cast<AllocFn>(alloc_fn), reinterpret_cast<FreeFn>(free_fn)));
  }

  void changeCurrentAllocator(const std::shared_ptr<PluggableAllocator>& allocator) const override {
    // torch.cuda.memory.change_current_allocator: refused once CUDA's
    // allocator is in use.
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(cudaAllocatorOf(allocator.get()));
  }

  c10::Allocator* targetAllocator() const override {
    return c10::cuda::CUDACachingAllocator::get();
  }

  c10::Allocator* pinnedAllocator() const override {
    // CUDA's caching host allocator: pinned accel memory is pinned CUDA
    // memory, with its stream-aware reuse.
    return at::getHostAllocator(kCuda);
  }

  bool isPinnedPtr(const void* ptr) const override {
    return at::detail::getCUDAHooks().isPinnedPtr(ptr);
  }

  at::Generator newTargetGenerator(c10::DeviceIndex device) const override {
    return at::cuda::detail::createCUDAGenerator(device);
  }

  SharedStorageHandle shareStorage(c10::StorageImpl& storage) const override {
    return shareCudaStorage(storage);
  }

  c10::DataPtr openSharedStorage(const SharedStorageHandle& handle, c10::DeviceIndex device) const override {
    return openCudaSharedStorage(handle, device);
  }

  void reuseSharedStorage(const SharedStorageHandle& handle, c10::DeviceIndex device) const override {
    reuseCudaSharedStorage(handle, device);
  }

  void collectSharedMemory() const override {
    collectCudaSharedMemory();
  }

  // CUDA's interprocess events, as torch.cuda.Event(interprocess=True) makes
  // them (CUDA requires them not to measure time).
  void* createInterprocessEvent(c10::DeviceIndex device, bool blocking) const override {
    c10::cuda::CUDAGuard guard(device);
    cudaEvent_t event = nullptr;
    C10_CUDA_CHECK(cudaEventCreateWithFlags(
        &event,
        cudaEventDisableTiming | cudaEventInterprocess | (blocking ? cudaEventBlockingSync : cudaEventDefault)));
    return event;
  }

  std::string interprocessEventHandle(void* event, c10::DeviceIndex device) const override {
    c10::cuda::CUDAGuard guard(device);
    cudaIpcEventHandle_t handle;
    C10_CUDA_CHECK(cudaIpcGetEventHandle(&handle, static_cast<cudaEvent_t>(event)));
    return std::string(reinterpret_cast<const char*>(&handle), sizeof(handle));
  }

  void* openInterprocessEvent(const std::string& handle, c10::DeviceIndex device) const override {
    TORCH_CHECK_VALUE(
        handle.size() == sizeof(cudaIpcEventHandle_t),
        "accel: not an interprocess event handle of accel's CUDA runtime (expected the ",
        sizeof(cudaIpcEventHandle_t),
        " bytes of Event.ipc_handle(), got ",
        handle.size(),
        " bytes)");
    c10::cuda::CUDAGuard guard(device);
    cudaIpcEventHandle_t ipc_handle;
    std::memcpy(&ipc_handle, handle.data(), sizeof(ipc_handle));
    cudaEvent_t event = nullptr;
    C10_CUDA_CHECK(cudaIpcOpenEventHandle(&event, ipc_handle));
    return event;
  }

  bool exchangeTargetAllocationsAreAccel(bool /*enabled*/) const noexcept override {
    return true; // every CUDA caching allocator block can become accel memory
  }

  bool adoptTargetAllocation(c10::DataPtr& ptr, c10::DeviceIndex device) const override {
    // Blocks of CUDA's caching allocator are freed by pointer, whatever the
    // DataPtr names; memory from any other CUDA allocator is copied instead.
    if (ptr.get_deleter() != c10::cuda::CUDACachingAllocator::get()->raw_deleter() || ptr.device().index() != device) {
      return false;
    }
    ptr.unsafe_set_device(c10::Device(kAccel, device));
    return true;
  }

  std::unique_ptr<Graph> newGraph(bool keep_graph) const override {
    return newCudaGraph(keep_graph);
  }

  bool isStreamCapturing(const c10::Stream& stream) const override {
    return isCudaStreamCapturing(stream);
  }

  c10::MempoolId_t graphPoolHandle() const override {
    return at::cuda::graph_pool_handle();
  }

  void clearLibraryWorkspaces() const override {
    at::cuda::clearCublasWorkspaces();
  }

  // --- Fault injection: not on CUDA, whose driver injects none -------------

  void injectFaults(FaultKind kind, const FaultPlan& plan) const override {
    TORCH_CHECK(
        !plan.armed(),
        "accel: fault injection (",
        faultKindName(kind),
        ") needs the host runtime; this process runs the cuda runtime (docs/fault-injection.md)");
  }

  FaultCounts faultCounts(FaultKind /*kind*/) const override {
    return FaultCounts{};
  }

  void checkCopyFault(c10::DeviceIndex /*device*/) const override {}

  // --- Capabilities: accel's kernels are CUDA's, on CUDA memory ------------

  bool memoryIsHostMemory() const noexcept override {
    return false;
  }

  InductorKernels inductorKernels() const noexcept override {
    return InductorKernels::Triton;
  }

  bool compilesTriton() const noexcept override {
    return true;
  }

  bool targetKernelsRaiseCudaAlerts() const noexcept override {
    return true;
  }

  bool kinetoTracesTargetKernels() const noexcept override {
    return true; // CUPTI
  }

  ProfilerAnnotations profilerAnnotations() const noexcept override {
    return ProfilerAnnotations::Nvtx;
  }

  c10::DeviceType memoryTraceDeviceType() const noexcept override {
    return c10::kCUDA; // CUDA's caching allocator reports accel memory as its own
  }

  bool compositeRunsTargetFlashAttention() const noexcept override {
    return false; // the composite would call the CPU's flash operator, which CUDA lacks
  }

  at::SDPBackend flashAttentionSubstitute(const sdp::sdp_params& target_params) const override {
    // After flash attention, CUDA's order (sdp::select_sdp_backend) tries
    // memory-efficient attention, which honours torch.nn.attention.sdpa_kernel
    // through the same checks.
    return sdp::can_use_mem_efficient_attention(target_params, /*debug=*/false) ? at::SDPBackend::efficient_attention
                                                                                : at::SDPBackend::math;
  }

private:
  c10::cuda::impl::CUDAGuardImpl cuda_;
};

} // namespace

const Runtime& cudaRuntime() {
  static const CudaRuntime instance;
  return instance;
}

} // namespace torch_accel
