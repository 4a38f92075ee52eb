// The host runtime: accel devices are accelrt's emulated devices.
//
// Streams follow c10::cuda's scheme so the two runtimes behave alike: id 0 is
// a device's default stream; other ids name streams of a lazily created
// per-device pool (kPoolSize low-priority, kPoolSize high-priority streams,
// handed out round-robin). The current stream is per thread and per device.
// Events are accelrt events. accelrt completes work before returning, so
// queries report completion and waits return at once, exactly as they would
// on CUDA for work that has finished. While a graph capture records a stream
// (see GraphRecording.h), what would wait for that stream's work fails the
// capture, as on CUDA, and events recorded on it belong to the capture.

#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/Environment.h>
#include <csrc/runtime/FaultInjection.h>
#include <csrc/runtime/GraphRecording.h>
#include <csrc/runtime/Runtime.h>
#include <csrc/runtime/host/AccelrtCheck.h>
#include <csrc/runtime/host/HostAllocator.h>
#include <csrc/runtime/host/HostGraph.h>
#include <csrc/runtime/host/HostPinnedAllocator.h>
#include <csrc/runtime/host/HostSharedMemory.h>
#include <csrc/runtime/host/HostTargetAllocator.h>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/CPUAllocator.h>

#include <array>
#include <atomic>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace torch_accel {
namespace {

// A pluggable allocator on the host runtime: where the segments of the pools
// that name it (or, after changeCurrentAllocator, all segments) come from.
class HostPluggableAllocator final : public PluggableAllocator {
public:
  explicit HostPluggableAllocator(std::shared_ptr<const HostSegmentSource> source) : source_(std::move(source)) {}
  const std::shared_ptr<const HostSegmentSource>& source() const {
    return source_;
  }

private:
  std::shared_ptr<const HostSegmentSource> source_;
};

std::shared_ptr<const HostSegmentSource> sourceOf(PluggableAllocator& allocator) {
  auto* host = dynamic_cast<HostPluggableAllocator*>(&allocator);
  TORCH_CHECK_TYPE(host != nullptr, "accel (host runtime): the allocator is not one of the host runtime's");
  return host->source();
}

constexpr int kMaxDevices = 64; // accelrt's own limit
constexpr int kPoolSize = 32;
constexpr int kPriorityClasses = 2; // 0: low (default) priority, 1: high

// Host device count: TORCH_ACCEL_HOST_DEVICES, default 2 (0 is allowed: a
// process without accel devices). Read once, when the host runtime is selected.
int configuredDeviceCount() {
  return static_cast<int>(integerFromEnvironment("TORCH_ACCEL_HOST_DEVICES", 0, kMaxDevices).value_or(2));
}

// TORCH_ACCEL_HOST_MEMORY_MB: the memory of each host device, in MiB; unset
// keeps accelrt's default. Lets tests and demos exercise out-of-memory paths.
// At least 1 MiB, and at most what a size_t counts in bytes.
std::optional<size_t> configuredMemoryLimit() {
  constexpr auto kMaxMiB = static_cast<int64_t>(std::numeric_limits<size_t>::max() >> 20);
  const auto mib = integerFromEnvironment("TORCH_ACCEL_HOST_MEMORY_MB", 1, kMaxMiB);
  if (!mib) {
    return std::nullopt;
  }
  return static_cast<size_t>(*mib) << 20;
}

// An interprocess event's handle (see HostRuntime::interprocessEventHandle):
// this tag, then the exporting event's address, zero-padded to CUDA's size.
constexpr size_t kInterprocessEventHandleSize = 64;
constexpr char kInterprocessEventMagic[16] = "accelrt-ipc-evt";

// Runs `fn` with `device` current for accelrt calls that act on the current
// device, restoring the caller's device afterwards (also on exceptions).
template <typename Fn> auto onDevice(c10::DeviceIndex device, Fn&& fn) {
  int previous = 0;
  TORCH_ACCEL_ACCELRT_CHECK(accelrtGetDevice(&previous));
  if (previous == device) {
    return fn();
  }
  TORCH_ACCEL_ACCELRT_CHECK(accelrtSetDevice(device));
  struct Restore {
    int device;
    ~Restore() {
      accelrtSetDevice(device);
    }
  } restore{previous};
  return fn();
}

struct StreamPool {
  std::once_flag created;
  std::array<std::array<accelrtStream_t, kPoolSize>, kPriorityClasses> streams{};
  std::array<std::atomic<uint32_t>, kPriorityClasses> next{};
};

// Per-thread current stream id of each device; 0 (default stream) initially.
thread_local std::array<c10::StreamId, kMaxDevices> current_stream_ids{};

class HostRuntime final : public Runtime {
public:
  HostRuntime() {
    const int count = configuredDeviceCount();
    // accelrt fixes its device count at first use. Another user of accelrt in
    // this process may have fixed it first; then its count stands.
    const accelrtError_t err = accelrtSetDeviceCount(count);
    TORCH_CHECK(
        err == accelrtSuccess || err == accelrtErrorAlreadyInitialized,
        "accel (host runtime): cannot configure ",
        count,
        " devices: ",
        accelrtGetErrorString(err));
    int actual = 0;
    accelrtGetDeviceCount(&actual);
    device_count_ = static_cast<c10::DeviceIndex>(actual);
    if (const auto limit = configuredMemoryLimit()) {
      for (int device = 0; device < actual; ++device) {
        TORCH_ACCEL_ACCELRT_CHECK(accelrtDeviceSetMemoryLimit(device, *limit));
      }
    }
    // TORCH_ACCEL_HOST_FAULTS: faults armed from the start, so that a child
    // process (a DataLoader worker, a rank) can run under them.
    for (const auto& [kind, plan] : faultPlansFromEnvironment("TORCH_ACCEL_HOST_FAULTS")) {
      injectFaults(kind, plan);
    }
  }

  const char* name() const noexcept override {
    return "host";
  }

  c10::DeviceType targetType() const noexcept override {
    return c10::DeviceType::CPU;
  }

  void init() const override {}

  c10::Device exchangeDevice(c10::Device device) const override {
    const auto previous = getDevice();
    if (previous.index() != device.index()) {
      setDevice(device);
    }
    return previous;
  }

  c10::Device getDevice() const override {
    int device = 0;
    TORCH_ACCEL_ACCELRT_CHECK(accelrtGetDevice(&device));
    return c10::Device(kAccel, static_cast<c10::DeviceIndex>(device));
  }

  void setDevice(c10::Device device) const override {
    TORCH_ACCEL_ACCELRT_CHECK(accelrtSetDevice(device.index()));
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    accelrtSetDevice(device.index());
  }

  c10::Stream getStream(c10::Device device) const override {
    return stream(device.index(), current_stream_ids[device.index()]);
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return stream(device.index(), 0);
  }

  c10::Stream getNewStream(c10::Device device, int priority) const override {
    // As CUDA: a negative priority asks for a high-priority stream.
    return poolStream(device.index(), priority < 0 ? 1 : 0);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool isHighPriority) const override {
    return poolStream(device.index(), isHighPriority ? 1 : 0);
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    handle(stream); // rejects ids that name no stream
    auto& slot = current_stream_ids[stream.device_index()];
    const auto previous = this->stream(stream.device_index(), slot);
    slot = stream.id();
    return previous;
  }

  void* getStreamNativeHandle(const c10::Stream stream) const override {
    return handle(stream);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count_;
  }

  c10::DeviceCapability getDeviceCapability(c10::Device /*device*/) const override {
    // Host kernels are PyTorch's CPU kernels: every scalar type.
    return c10::DeviceCapability();
  }

  void
  record(void** event, const c10::Stream& stream, const c10::DeviceIndex /*device_index*/, const c10::EventFlag flag)
      const override {
    onDevice(stream.device_index(), [&] {
      if (*event == nullptr) {
        accelrtEvent_t created = nullptr;
        const unsigned flags =
            flag == c10::EventFlag::BACKEND_DEFAULT ? accelrtEventDefault : accelrtEventDisableTiming;
        TORCH_ACCEL_ACCELRT_CHECK(accelrtEventCreateWithFlags(&created, flags));
        *event = created;
      }
      TORCH_ACCEL_ACCELRT_CHECK(accelrtEventRecord(static_cast<accelrtEvent_t>(*event), handle(stream)));
      return 0;
    });
    if (C10_UNLIKELY(anyCaptureRecording())) {
      noteEventRecorded(*event, stream);
    }
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) {
      return;
    }
    if (C10_UNLIKELY(anyCaptureRecording())) {
      joinOrCheckCapture(event, stream);
    }
    onDevice(stream.device_index(), [&] {
      TORCH_ACCEL_ACCELRT_CHECK(accelrtStreamWaitEvent(handle(stream), static_cast<accelrtEvent_t>(event), 0));
      return 0;
    });
  }

  bool queryEvent(void* event) const override {
    if (event == nullptr) {
      return true;
    }
    checkEventNotCaptured(event, "querying an event recorded during the capture (Event.query)");
    const auto accelrt_event = static_cast<accelrtEvent_t>(event);
    const accelrtError_t err = accelrtEventQuery(accelrt_event);
    if (err == accelrtErrorNotReady) {
      return false;
    }
    if (err != accelrtSuccess) {
      throwAccelrtEventError(accelrt_event, err, "accelrtEventQuery(event)");
    }
    return true;
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    if (event != nullptr) {
      if (C10_UNLIKELY(anyCaptureRecording())) {
        forgetEvent(event); // a new event may get its address
      }
      accelrtEventDestroy(static_cast<accelrtEvent_t>(event));
    }
  }

  bool queryStream(const c10::Stream& stream) const override {
    checkStreamNotCapturing(stream, "querying a capturing stream (Stream.query)");
    return onDevice(stream.device_index(), [&] {
      const accelrtError_t err = accelrtStreamQuery(handle(stream));
      if (err == accelrtErrorNotReady) {
        return false;
      }
      if (err != accelrtSuccess) {
        throwAccelrtError(err, "accelrtStreamQuery(stream)");
      }
      return true;
    });
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    checkStreamNotCapturing(stream, "synchronizing a capturing stream (Stream.synchronize)");
    onDevice(stream.device_index(), [&] {
      TORCH_ACCEL_ACCELRT_CHECK(accelrtStreamSynchronize(handle(stream)));
      return 0;
    });
  }

  void synchronizeEvent(void* event) const override {
    if (event != nullptr) {
      checkEventNotCaptured(event, "synchronizing an event recorded during the capture (Event.synchronize)");
      TORCH_ACCEL_ACCELRT_EVENT_CHECK(
          static_cast<accelrtEvent_t>(event), accelrtEventSynchronize(static_cast<accelrtEvent_t>(event)));
    }
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    if (C10_UNLIKELY(anyCaptureRecording())) {
      failCaptureOnDevice(device_index, "synchronizing the device (torch.accel.synchronize)");
    }
    onDevice(device_index, [] {
      TORCH_ACCEL_ACCELRT_CHECK(accelrtDeviceSynchronize());
      return 0;
    });
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    hostAllocator()->recordStream(data_ptr, stream);
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(start && end, "Both events must be recorded before calculating elapsed time.");
    float ms = 0;
    TORCH_ACCEL_ACCELRT_EVENT_CHECK(
        static_cast<accelrtEvent_t>(start),
        accelrtEventElapsedTime(&ms, static_cast<accelrtEvent_t>(start), static_cast<accelrtEvent_t>(end)));
    return static_cast<double>(ms);
  }

  bool hasPrimaryContext(c10::DeviceIndex /*device*/) const override {
    // accelrt devices have no contexts to create: each is always ready.
    return true;
  }

  DeviceProperties getDeviceProperties(c10::DeviceIndex device) const override {
    accelrtDeviceProp prop{};
    TORCH_ACCEL_ACCELRT_CHECK(accelrtGetDeviceProperties(&prop, device));
    DeviceProperties out;
    out.name = prop.name;
    out.total_memory = prop.totalGlobalMem;
    out.major = prop.major;
    out.minor = prop.minor;
    out.multi_processor_count = prop.multiProcessorCount;
    out.warp_size = prop.warpSize;
    out.max_threads_per_block = static_cast<int>(prop.maxThreadsPerBlock);
    out.max_threads_per_multi_processor = static_cast<int>(prop.maxThreadsPerBlock);
    return out;
  }

  c10::Device getDeviceFromPtr(const void* ptr) const override {
    // accel memory by its base address, a pluggable allocator's included.
    const c10::DeviceIndex device = accelrtMemoryDevice(const_cast<void*>(ptr));
    if (device >= 0) {
      return c10::Device(kAccel, device);
    }
    accelrtPointerAttributes attributes{};
    TORCH_ACCEL_ACCELRT_CHECK(accelrtPointerGetAttributes(&attributes, ptr));
    TORCH_CHECK(
        attributes.type != accelrtMemoryTypeUnregistered,
        "The pointer ",
        ptr,
        " resides on host memory and is not registered with any accel (host runtime) device");
    if (attributes.type == accelrtMemoryTypeHost) {
      // Pinned memory, which CUDA's answer (at::cuda::getDeviceFromPtr)
      // attributes to the device it was allocated against; accelrt's belongs
      // to none, so it goes to the current device, as a pinned allocation
      // made now would on CUDA.
      return getDevice();
    }
    return c10::Device(kAccel, static_cast<c10::DeviceIndex>(attributes.device));
  }

  std::pair<int, int> streamPriorityRange() const override {
    int least = 0;
    int greatest = 0;
    TORCH_ACCEL_ACCELRT_CHECK(accelrtDeviceGetStreamPriorityRange(&least, &greatest));
    return {least, greatest};
  }

  int streamPriority(const c10::Stream& stream) const override {
    // The pool's streams were created with the ends of the range; the
    // default stream (a null handle) reports 0.
    int priority = 0;
    TORCH_ACCEL_ACCELRT_CHECK(accelrtStreamGetPriority(handle(stream), &priority));
    return priority;
  }

  ObservableAllocator* allocator() const override {
    return hostAllocator();
  }

  c10::Allocator* targetAllocator() const override {
    return hostTargetAllocator();
  }

  void createPool(
      c10::DeviceIndex device,
      c10::MempoolId_t id,
      const std::shared_ptr<PluggableAllocator>& allocator,
      bool use_on_oom,
      bool /*no_split*/) const override {
    // no_split: the host runtime never splits a segment.
    TORCH_CHECK_NOT_IMPLEMENTED(
        !use_on_oom,
        "accel (host runtime): MemPool(use_on_oom=True) is not supported: the host runtime's allocator "
        "does not fall back to a pool's memory when an allocation fails");
    auto& ledger = hostMemoryLedger();
    TORCH_CHECK_VALUE(
        ledger.poolUseCount(id) == 0, "accel: memory pool (", id.first, ", ", id.second, ") exists already");
    ledger.createOrIncrefPool(device, id, allocator ? sourceOf(*allocator) : nullptr);
  }

  void releasePool(c10::DeviceIndex /*device*/, c10::MempoolId_t id) const override {
    hostMemoryLedger().releasePool(id);
  }

  int poolUseCount(c10::DeviceIndex /*device*/, c10::MempoolId_t id) const override {
    return hostMemoryLedger().poolUseCount(id);
  }

  void beginAllocateCurrentThreadToPool(c10::DeviceIndex device, c10::MempoolId_t id) const override {
    const auto thread = std::this_thread::get_id();
    hostMemoryLedger().beginAllocateToPool(
        device, id, [thread](void* /*stream*/) { return std::this_thread::get_id() == thread; });
  }

  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id) const override {
    hostMemoryLedger().endAllocateToPool(device, id);
  }

  std::shared_ptr<PluggableAllocator> newPluggableAllocator(uintptr_t alloc_fn, uintptr_t free_fn) const override {
    return std::make_shared<HostPluggableAllocator>(std::make_shared<const HostSegmentSource>(HostSegmentSource{
        reinterpret_cast<HostSegmentSource::AllocFn>(alloc_fn), reinterpret_cast<HostSegmentSource::FreeFn>(free_fn)}));
  }

  void changeCurrentAllocator(const std::shared_ptr<PluggableAllocator>& allocator) const override {
    setDefaultSegmentSource(sourceOf(*allocator));
  }

  c10::Allocator* pinnedAllocator() const override {
    return hostPinnedAllocator();
  }

  bool isPinnedPtr(const void* ptr) const override {
    return isHostPinnedPtr(ptr);
  }

  at::Generator newTargetGenerator(c10::DeviceIndex /*device*/) const override {
    return at::make_generator<at::CPUGeneratorImpl>();
  }

  SharedStorageHandle shareStorage(c10::StorageImpl& storage) const override {
    return shareHostStorage(storage);
  }

  c10::DataPtr openSharedStorage(const SharedStorageHandle& handle, c10::DeviceIndex device) const override {
    return openHostSharedStorage(handle, device);
  }

  void reuseSharedStorage(const SharedStorageHandle& /*handle*/, c10::DeviceIndex /*device*/) const override {
    // accelrt's work is complete when queued, and the segment counts its own
    // mappings: a message holds nothing more.
  }

  void collectSharedMemory() const override {
    // Nothing is kept for receivers: a shared segment lives while any process
    // maps it or holds a descriptor of it, and the kernel frees it when the
    // last one lets go (see HostSharedMemory.cpp).
  }

  // accelrt's work is complete when queued (see above), so an interprocess
  // event is complete in every process that opens it: its handle only
  // identifies an accel host-runtime event (the size of CUDA's, so that
  // code which stores handles sees the same), and opening it makes a local
  // event that was never recorded, which counts as complete.
  void* createInterprocessEvent(c10::DeviceIndex device, bool blocking) const override {
    return onDevice(device, [&] {
      accelrtEvent_t event = nullptr;
      TORCH_ACCEL_ACCELRT_CHECK(accelrtEventCreateWithFlags(
          &event, accelrtEventDisableTiming | (blocking ? accelrtEventBlockingSync : accelrtEventDefault)));
      return static_cast<void*>(event);
    });
  }

  std::string interprocessEventHandle(void* event, c10::DeviceIndex /*device*/) const override {
    TORCH_CHECK(event != nullptr, "accel: no interprocess event to export");
    std::string handle(kInterprocessEventHandleSize, '\0');
    std::memcpy(handle.data(), kInterprocessEventMagic, sizeof(kInterprocessEventMagic));
    const uint64_t id = reinterpret_cast<uintptr_t>(event);
    std::memcpy(handle.data() + sizeof(kInterprocessEventMagic), &id, sizeof(id));
    return handle;
  }

  void* openInterprocessEvent(const std::string& handle, c10::DeviceIndex device) const override {
    TORCH_CHECK_VALUE(
        handle.size() == kInterprocessEventHandleSize &&
            std::memcmp(handle.data(), kInterprocessEventMagic, sizeof(kInterprocessEventMagic)) == 0,
        "accel: not an interprocess event handle of accel's host runtime (expected the ",
        kInterprocessEventHandleSize,
        " bytes of Event.ipc_handle(), got ",
        handle.size(),
        " bytes)");
    return createInterprocessEvent(device, /*blocking=*/false);
  }

  bool exchangeTargetAllocationsAreAccel(bool enabled) const noexcept override {
    return exchangeCpuAllocationsAreAccel(enabled);
  }

  std::unique_ptr<Graph> newGraph(bool keep_graph) const override {
    return newHostGraph(keep_graph);
  }

  bool isStreamCapturing(const c10::Stream& stream) const override {
    return anyCaptureRecording() && recordingCaptureOf(stream) != nullptr;
  }

  c10::MempoolId_t graphPoolHandle() const override {
    return hostGraphPoolHandle();
  }

  void clearLibraryWorkspaces() const override {
    // The CPU's kernels keep no workspaces per stream.
  }

  // --- Fault injection: accelrt's (accelrtFaultInject) ----------------------

  void injectFaults(FaultKind kind, const FaultPlan& plan) const override {
    TORCH_CHECK_VALUE(
        plan.probability >= 0.0 && plan.probability <= 1.0,
        "accel: a fault probability must lie in [0, 1], got ",
        plan.probability);
    TORCH_ACCEL_ACCELRT_CHECK(accelrtFaultInject(accelrtKind(kind), plan.nth, plan.probability, plan.seed));
    if (kind == FaultKind::Copy) {
      setCopyFaultsArmed(plan.armed());
    }
  }

  FaultCounts faultCounts(FaultKind kind) const override {
    unsigned long long operations = 0;
    unsigned long long injected = 0;
    TORCH_ACCEL_ACCELRT_CHECK(accelrtFaultGetCounts(accelrtKind(kind), &operations, &injected));
    return FaultCounts{operations, injected};
  }

  void checkCopyFault(c10::DeviceIndex device) const override {
    // The CPU's copy kernels copy accel memory themselves, without accelrt:
    // each copy counts as one of accelrt's.
    const accelrtError_t err = accelrtFaultCheck(accelrtFaultCopy);
    TORCH_CHECK(
        err == accelrtSuccess,
        "accel:",
        static_cast<int>(device),
        " (host runtime) error: copy failed: ",
        accelrtGetErrorString(err),
        " (",
        accelrtGetErrorName(err),
        ")");
  }

  // --- Capabilities: accel's kernels are the CPU's, on host memory ---------

  bool memoryIsHostMemory() const noexcept override {
    return true;
  }

  InductorKernels inductorKernels() const noexcept override {
    return InductorKernels::Cpp;
  }

  bool compilesTriton() const noexcept override {
    return false; // Triton's interpreter runs Triton kernels on host memory (TORCH_ACCEL_INDUCTOR=triton)
  }

  bool targetKernelsRaiseCudaAlerts() const noexcept override {
    return false; // the CPU's kernels are deterministic and never alert: accel raises CUDA's alerts
  }

  bool kinetoTracesTargetKernels() const noexcept override {
    return false; // Kineto traces no CPU kernels; accel records them (DeviceActivity.h)
  }

  ProfilerAnnotations profilerAnnotations() const noexcept override {
    return ProfilerAnnotations::Itt;
  }

  c10::DeviceType memoryTraceDeviceType() const noexcept override {
    return kAccel; // HostAllocator reports its allocations and frees
  }

  bool compositeRunsTargetFlashAttention() const noexcept override {
    return true; // _scaled_dot_product_flash_attention_for_cpu, as for cpu
  }

  at::SDPBackend flashAttentionSubstitute(const sdp::sdp_params& /*target_params*/) const override {
    return at::SDPBackend::flash_attention; // never needed: see compositeRunsTargetFlashAttention
  }

  bool adoptTargetAllocation(c10::DataPtr& ptr, c10::DeviceIndex device) const override {
    if (!isAccelrtMemory(ptr)) {
      return false; // allocated outside the fallback's scope, or by another allocator
    }
    if (ptr.get() != nullptr && accelrtMemoryDevice(ptr.get()) != device) {
      return false;
    }
    ptr.unsafe_set_device(c10::Device(kAccel, device));
    return true;
  }

private:
  // The capture checks of other threads' operations run under the lock that
  // ends captures (GraphRecording.h): the capture may belong to another thread.
  static void checkStreamNotCapturing(const c10::Stream& stream, const char* operation) {
    if (C10_UNLIKELY(anyCaptureRecording())) {
      failCaptureOfStream(stream, operation);
    }
  }

  static void checkEventNotCaptured(void* event, const char* operation) {
    if (C10_UNLIKELY(anyCaptureRecording())) {
      failCaptureOfEvent(event, operation, runtime().getDevice().index());
    }
  }

  static accelrtFaultKind accelrtKind(FaultKind kind) {
    switch (kind) {
    case FaultKind::Allocation:
      return accelrtFaultAllocation;
    case FaultKind::StreamEvent:
      return accelrtFaultStreamEvent;
    case FaultKind::Copy:
      return accelrtFaultCopy;
    }
    TORCH_CHECK(false, "accel: unknown fault kind ", static_cast<int>(kind));
  }

  static c10::Stream stream(c10::DeviceIndex device, c10::StreamId id) {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kAccel, device), id);
  }

  // The device's stream pool, created on first use. A creation that fails
  // destroys the streams it made, so that the next use, which tries again,
  // does not leave them behind in accelrt.
  StreamPool& pool(c10::DeviceIndex device) const {
    StreamPool& pool = pools_[device];
    std::call_once(pool.created, [&] {
      const auto [least, greatest] = streamPriorityRange();
      onDevice(device, [&] {
        try {
          for (int cls = 0; cls < kPriorityClasses; ++cls) {
            for (auto& s : pool.streams[cls]) {
              TORCH_ACCEL_ACCELRT_CHECK(accelrtStreamCreateWithPriority(&s, 0, cls == 0 ? least : greatest));
            }
          }
        } catch (...) {
          for (auto& streams : pool.streams) {
            for (auto& s : streams) {
              if (s != nullptr) {
                accelrtStreamDestroy(s);
                s = nullptr;
              }
            }
          }
          throw;
        }
        return 0;
      });
    });
    return pool;
  }

  // Pool stream ids: 1 + priority_class * kPoolSize + slot.
  c10::Stream poolStream(c10::DeviceIndex device, int priority_class) const {
    const uint32_t slot = pool(device).next[priority_class]++ % kPoolSize;
    return stream(device, 1 + priority_class * kPoolSize + static_cast<c10::StreamId>(slot));
  }

  accelrtStream_t handle(const c10::Stream& stream) const {
    const c10::StreamId id = stream.id();
    if (id == 0) {
      return nullptr; // accelrt's default stream of the current device
    }
    TORCH_CHECK(
        id > 0 && id <= kPriorityClasses * kPoolSize,
        "Invalid accel stream id ",
        id,
        " on accel:",
        static_cast<int>(stream.device_index()));
    const auto index = id - 1;
    return pool(stream.device_index()).streams[index / kPoolSize][index % kPoolSize];
  }

  c10::DeviceIndex device_count_ = 0;
  mutable std::array<StreamPool, kMaxDevices> pools_;
};

} // namespace

const Runtime& hostRuntime() {
  static const HostRuntime instance;
  return instance;
}

} // namespace torch_accel
