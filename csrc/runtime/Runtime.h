#pragma once

// The runtime interface: everything torch_accel needs from the machine that
// backs accel devices. Two implementations exist, chosen once per process:
//
//   CudaRuntime  (csrc/runtime/cuda)  accel:N is cuda:N; streams and events are
//                                     CUDA's own, memory is CUDA's caching allocator.
//   HostRuntime  (csrc/runtime/host)  accel:N is an accelrt device over host memory.
//
// A Runtime is a DeviceGuardImplInterface whose devices and streams are accel
// (PrivateUse1) devices and streams: c10 already documents that contract
// precisely, so the runtimes implement it instead of a look-alike. The guard
// registered for PrivateUse1 (AccelGuardImpl) forwards to the selected
// runtime after validating arguments. Code above this interface never asks
// which runtime is running; it asks the runtime for what it needs (for
// example targetType(), the device type whose kernels run accel's work).

#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/FaultInjection.h>
#include <csrc/runtime/Graph.h>
#include <csrc/runtime/ObservableAllocator.h>

#include <ATen/SDPBackend.h>
#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/macros/Macros.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace sdp {
struct sdp_params;
} // namespace sdp

namespace torch_accel {

// What torch.accel.get_device_properties reports, whichever runtime runs.
struct DeviceProperties {
  std::string name;
  uint64_t total_memory = 0;
  int major = 0;
  int minor = 0;
  int multi_processor_count = 0;
  int warp_size = 0;
  int max_threads_per_block = 0;
  int max_threads_per_multi_processor = 0;
  int regs_per_multiprocessor = 0;
  uint64_t shared_memory_per_block = 0;
  uint64_t shared_memory_per_multiprocessor = 0;
  uint64_t l2_cache_size = 0;
  std::string uuid;
};

// What another process needs to map the memory of a shared accel storage
// (torch.multiprocessing). `fd` is a file descriptor of the memory, which
// torch.multiprocessing passes between processes as it passes CPU storages'
// ones (-1 where the runtime needs none); `handle` holds the runtime's own
// bytes (empty where it needs none); `nbytes` is the storage's size. `key`,
// where not empty, is the same for every share of one storage, so that a
// receiver maps it once (without it, the file's identity serves).
struct SharedStorageHandle {
  int fd = -1;
  std::string handle;
  uint64_t nbytes = 0;
  std::string key;
};

// An allocator whose functions a shared library provides
// (torch.accel.memory.AccelPluggableAllocator): each runtime's own object for
// them, which memory pools and changeCurrentAllocator() take.
class PluggableAllocator {
public:
  virtual ~PluggableAllocator() = default;
};

// Which kernels Inductor generates for accel unless TORCH_ACCEL_INDUCTOR
// says otherwise (torch_accel/_inductor/codegen_config.py).
enum class InductorKernels {
  Cpp,    // Inductor's C++ kernels, as for cpu
  Triton, // Triton kernels, as for cuda
};

// The annotation ranges (torch.profiler's mark, range push and pop) that
// accel's profiler stubs forward to.
enum class ProfilerAnnotations {
  None,
  Nvtx, // NVTX, registered by libtorch_cuda
  Itt,  // Intel ITT, where PyTorch was built with it
};

// The contract, by concern: the device, memory, streams and events, graphs,
// and the capabilities that code above the interface asks instead of which
// runtime runs. The devices, streams and events of c10's guard interface
// (getDevice, getStream, record, block, ...) are part of it too.
class Runtime : public c10::impl::DeviceGuardImplInterface {
public:
  c10::DeviceType type() const final {
    return kAccel;
  }

  // === The device ==========================================================

  // "cuda" or "host": for messages to users only, never branched on (code
  // above the interface asks a capability instead: see the last group).
  virtual const char* name() const noexcept = 0;

  // The device type whose kernels, tensors and generators stand in for accel's.
  virtual c10::DeviceType targetType() const noexcept = 0;

  // One-time heavy initialisation (contexts, allocators). Called through the
  // PrivateUse1 hooks' init(), hence exactly once; deviceCount() and the
  // cheap queries work before it.
  virtual void init() const = 0;

  // Whether accel work has already touched `device` (it owns a context).
  virtual bool hasPrimaryContext(c10::DeviceIndex device) const = 0;

  virtual DeviceProperties getDeviceProperties(c10::DeviceIndex device) const = 0;

  // A new, unshared generator of the target device type for accel:`device`.
  // accel generators wrap one each, so accel random streams are independent
  // of the target's default generators yet produce the same numbers for the
  // same seed.
  virtual at::Generator newTargetGenerator(c10::DeviceIndex device) const = 0;

  // === Memory ==============================================================

  // The accel device whose memory holds `ptr`; throws for foreign memory.
  virtual c10::Device getDeviceFromPtr(const void* ptr) const = 0;

  // Allocates accel memory on the current accel device; its DataPtrs carry
  // accel devices and are freed by the runtime.
  virtual ObservableAllocator* allocator() const = 0;

  // The allocator target kernels allocate with (CUDA's caching allocator,
  // or the CPU allocator): target tensors that kernels may resize use it.
  virtual c10::Allocator* targetAllocator() const = 0;

  // Page-locked host memory (Tensor.pin_memory) and whether `ptr` is in it.
  virtual c10::Allocator* pinnedAllocator() const = 0;
  virtual bool isPinnedPtr(const void* ptr) const = 0;

  // --- Target allocations, for the alias fallback (csrc/aten/TargetCall) ---

  // While enabled on this thread, memory that target kernels allocate is
  // accel memory of the current accel device, so results can be adopted
  // without a copy. Returns the previous setting. (CUDA: CUDA memory is accel
  // memory already; host: CPU allocations are redirected to accelrt.)
  virtual bool exchangeTargetAllocationsAreAccel(bool enabled) const noexcept = 0;

  // If `ptr`, memory a target kernel allocated, is accel memory of accel:
  // `device`, relabels it as such and returns true; otherwise leaves it alone
  // and returns false (the caller copies the data into accel memory).
  virtual bool adoptTargetAllocation(c10::DataPtr& ptr, c10::DeviceIndex device) const = 0;

  // --- Memory pools (torch.accel.MemPool, use_mem_pool) --------------------
  //
  // A pool is named by an id of graphPoolHandle() and belongs to one device.
  // Allocations routed to it take their memory from it; memory freed in it
  // stays in it (reserved) for its later allocations until its cache is
  // emptied: allocator()->emptyCache(id), or emptyCache() once the pool has
  // no uses left. Its segments are in the memory statistics of its device,
  // and snapshot(id) lists them. torch.cuda's semantics (CUDA's caching
  // allocator's private pools).

  // Creates pool `id` on `device` with one use. Its memory comes from
  // `allocator` (null: where the device allocator's comes from). `use_on_oom`:
  // an allocation outside the pool that fails may take the pool's cached
  // memory; `no_split`: the pool's segments are never split.
  virtual void createPool(
      c10::DeviceIndex device,
      c10::MempoolId_t id,
      const std::shared_ptr<PluggableAllocator>& allocator,
      bool use_on_oom,
      bool no_split) const = 0;

  // Gives one use of pool `id` back.
  virtual void releasePool(c10::DeviceIndex device, c10::MempoolId_t id) const = 0;

  // The uses of pool `id`: its creator's, each routing to it, each graph
  // capturing or captured into it.
  virtual int poolUseCount(c10::DeviceIndex device, c10::MempoolId_t id) const = 0;

  // Routes the allocations this thread makes on `device` to pool `id`, which
  // takes one more use, until endAllocateToPool (which does not give it back:
  // releasePool does).
  virtual void beginAllocateCurrentThreadToPool(c10::DeviceIndex device, c10::MempoolId_t id) const = 0;
  virtual void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id) const = 0;

  // --- Pluggable allocators -------------------------------------------------

  // The allocator of functions `alloc_fn` and `free_fn`, addresses of
  // functions with torch.cuda.memory.CUDAPluggableAllocator's signatures
  // (the stream is the runtime's native stream).
  virtual std::shared_ptr<PluggableAllocator> newPluggableAllocator(uintptr_t alloc_fn, uintptr_t free_fn) const = 0;

  // Makes `allocator` the source of all accel memory; only before accel
  // memory was first allocated.
  virtual void changeCurrentAllocator(const std::shared_ptr<PluggableAllocator>& allocator) const = 0;

  // --- Sharing memory between processes (torch.multiprocessing) ------------

  // Makes the memory of `storage` (accel, not empty) mappable by other
  // processes and returns what they need to map it. The runtime may move the
  // storage's bytes into such memory first: the storage, and every tensor
  // over it, keeps its contents and afterwards sees the shared memory.
  virtual SharedStorageHandle shareStorage(c10::StorageImpl& storage) const = 0;

  // Maps memory that another process shared with shareStorage(), as memory
  // of accel:`device`; the DataPtr keeps it mapped. Writes through it are
  // visible to every process that maps it, and the memory lives as long as
  // any of them holds it.
  virtual c10::DataPtr openSharedStorage(const SharedStorageHandle& handle, c10::DeviceIndex device) const = 0;

  // A receiver that already maps the memory of `handle` (a storage sent
  // again, or its own storage sent back) uses that mapping: orders the
  // current stream of accel:`device` after the sender's work, as
  // openSharedStorage() does, and releases what the sender counted for this
  // message.
  virtual void reuseSharedStorage(const SharedStorageHandle& handle, c10::DeviceIndex device) const = 0;

  // Frees the memory this process shared that it keeps only because other
  // processes might still use it, where every one of them has released it
  // since (torch.accel.ipc_collect). A runtime whose shared memory is freed
  // as soon as its last user releases it has nothing to collect.
  virtual void collectSharedMemory() const = 0;

  // === Streams and events ==================================================

  // Range of stream priorities, as (lowest priority, highest priority), with
  // CUDA's convention that a smaller number is a higher priority.
  // getNewStream() clamps a priority outside it to the nearest end.
  virtual std::pair<int, int> streamPriorityRange() const = 0;

  // The priority of `stream`, a value of streamPriorityRange() (the default
  // stream's is 0, the lowest).
  virtual int streamPriority(const c10::Stream& stream) const = 0;

  // --- Interprocess events (torch.accel.Event(interprocess=True)) ---------
  //
  // Raw events as the event functions of DeviceGuardImplInterface take them
  // (record, block, queryEvent, synchronizeEvent, destroyEvent), which other
  // processes can open; they do not measure time.

  // A new interprocess event on accel:`device`; `blocking`: synchronizing
  // on it blocks the host thread rather than spinning.
  virtual void* createInterprocessEvent(c10::DeviceIndex device, bool blocking) const = 0;

  // The bytes another process passes to openInterprocessEvent() to open
  // `event`, an event of createInterprocessEvent() on accel:`device`.
  virtual std::string interprocessEventHandle(void* event, c10::DeviceIndex device) const = 0;

  // The event of another process' interprocessEventHandle(), on accel:
  // `device`; throws for bytes that are no such handle.
  virtual void* openInterprocessEvent(const std::string& handle, c10::DeviceIndex device) const = 0;

  // === Graphs (Graph.h; torch.accel.Graph) =================================

  // A new graph, empty until it captures. `keep_graph`: as
  // torch.cuda.CUDAGraph's (instantiate at the first replay, not at the end
  // of the capture).
  virtual std::unique_ptr<Graph> newGraph(bool keep_graph) const = 0;

  // Whether `stream` is capturing a graph (also once the capture was
  // invalidated, until it ends, as cudaStreamIsCapturing reports it).
  virtual bool isStreamCapturing(const c10::Stream& stream) const = 0;

  // A new memory pool id that captures can share (graph_pool_handle()).
  virtual c10::MempoolId_t graphPoolHandle() const = 0;

  // Drops the workspaces that the target's libraries keep per stream (CUDA:
  // cuBLAS and cuBLASLt's, at::cuda::clearCublasWorkspaces; host: none).
  // torch.compile's captures (mode="reduce-overhead") call it before and
  // after each capture, as Inductor's cudagraph trees do around theirs: a
  // capture runs on a stream of its own, so a library allocates a workspace
  // for it during the capture, in the graph's private pool, and its global
  // map of workspaces would keep that memory (and the pool) alive and hand
  // it to work outside the graph.
  virtual void clearLibraryWorkspaces() const = 0;

  // === Fault injection (FaultInjection.h, docs/fault-injection.md) =========
  //
  // For tests of the error paths above the runtime: operations of an armed
  // kind fail as the device would fail them (an allocation with
  // torch.OutOfMemoryError, anything else with a RuntimeError), each naming
  // the device. A runtime that cannot inject faults raises from
  // injectFaults() and counts nothing.

  // Arms `kind` with `plan` (a plan that is not armed() disarms it) and
  // resets its counts.
  virtual void injectFaults(FaultKind kind, const FaultPlan& plan) const = 0;

  virtual FaultCounts faultCounts(FaultKind kind) const = 0;

  // A copy to, from or within accel:`device` is about to run on its current
  // stream: throws the failure injected for it, if any. Copy code calls it
  // only while copyFaultsArmed().
  virtual void checkCopyFault(c10::DeviceIndex device) const = 0;

  // === Capabilities ========================================================
  //
  // What code above the interface asks where the runtimes differ, instead of
  // which runtime runs. Each answer is fixed for the process; Python reads
  // them through torch_accel._C._runtime_capabilities (torch_accel/_core.py's
  // capabilities()).

  // Accel memory is host memory: host code (Inductor's C++ kernels, Triton's
  // interpreter) can read and write it directly.
  virtual bool memoryIsHostMemory() const noexcept = 0;

  // The kernels Inductor generates for accel by default: the target's own.
  virtual InductorKernels inductorKernels() const noexcept = 0;

  // Triton compiles kernels for accel's devices and launches them there
  // (otherwise only Triton's interpreter runs Triton kernels, on host memory).
  virtual bool compilesTriton() const noexcept = 0;

  // The target's kernels raise CUDA's nondeterministic alerts themselves
  // (they are CUDA's kernels); otherwise accel raises CUDA's alerts for them
  // (csrc/aten/NondeterministicAlerts.h).
  virtual bool targetKernelsRaiseCudaAlerts() const noexcept = 0;

  // Kineto's own tracer records the target's kernels, hence accel's (CUPTI
  // records CUDA's); otherwise accel records them itself
  // (csrc/profiler/DeviceActivity.h).
  virtual bool kinetoTracesTargetKernels() const noexcept = 0;

  // Where torch.profiler's annotation ranges on accel go: the target's.
  virtual ProfilerAnnotations profilerAnnotations() const noexcept = 0;

  // The device type under which PyTorch's GPU trace (c10::impl::GPUTrace)
  // reports the allocations and frees of accel memory: accel's own where the
  // runtime's allocator reports them (csrc/runtime/AccelTrace.h), or the
  // target's where the target's allocator serves accel memory and reports it
  // as its own (CUDA's caching allocator). The stream sanitizer listens there
  // (docs/stream-sanitizer.md).
  virtual c10::DeviceType memoryTraceDeviceType() const noexcept = 0;

  // scaled_dot_product_attention's policy (csrc/aten/ScaledDotProductAttention.cpp):
  // ATen's SDPA composite runs a flash-attention choice with CUDA's operator
  // (_scaled_dot_product_flash_attention) for cuda tensors only, and with the
  // CPU's (_scaled_dot_product_flash_attention_for_cpu) for every other device
  // type, accel's included.

  // Whether that composite, run for accel tensors, runs the target's flash
  // attention (host: yes). Where it does not (CUDA), accel's SDPA kernel runs
  // the composite's cuda branch itself.
  virtual bool compositeRunsTargetFlashAttention() const noexcept = 0;

  // The backend the composite takes instead where the target chose flash
  // attention for `target_params` (target tensors) and the composite cannot
  // run it, because something runs the composite without accel's kernel (a
  // tracer that decomposes SDPA below autograd): the fused backend the target
  // would take next, else math. Called only where
  // compositeRunsTargetFlashAttention() is false.
  virtual at::SDPBackend flashAttentionSubstitute(const sdp::sdp_params& target_params) const = 0;
};

// Scope in which target kernels allocate accel memory (see
// Runtime::exchangeTargetAllocationsAreAccel).
class TargetAllocationsAreAccel {
public:
  TargetAllocationsAreAccel();
  ~TargetAllocationsAreAccel();
  TargetAllocationsAreAccel(const TargetAllocationsAreAccel&) = delete;
  TargetAllocationsAreAccel& operator=(const TargetAllocationsAreAccel&) = delete;

private:
  bool previous_;
};

// The runtime of this process, selected on first call from TORCH_ACCEL_RUNTIME
// (auto, cuda, host) and the machine. Selecting is cheap and never creates a
// device context; Runtime::init() does the heavy part.
const Runtime& runtime();

// Runs the runtime's one-time init() (through the PrivateUse1 hooks, hence
// once) and records that accel is initialised in this process.
void initializeRuntime();

// Whether initializeRuntime() has run: until then the accel allocator reports
// itself uninitialised, so torch.accelerator's memory functions neither
// initialise accel nor report anything, as torch.cuda's before CUDA starts.
bool runtimeInitialized() noexcept;

// --- Fork safety --------------------------------------------------------------
//
// A process forked after accel was initialised inherits a copy of the
// parent's device state that it cannot use (CUDA contexts do not survive a
// fork; on the host runtime, the copy-on-write pages of accel memory are no
// longer the parent's). As with CUDA, such a child must not touch accel at
// all: every place where accel work starts (the device guard, the allocator,
// handing an accel tensor's memory to a target kernel) calls
// checkNotInBadFork(), which throws CUDA's error with accel's name. It costs
// one relaxed load: the flag is written only in the child, by a
// pthread_atfork handler that initializeRuntime() installs, before the child
// runs anything else.

namespace detail {
extern std::atomic<bool> in_bad_fork;
[[noreturn]] void throwInBadFork();
} // namespace detail

// Whether this process was forked from one that had initialised accel.
inline bool inBadFork() noexcept {
  return detail::in_bad_fork.load(std::memory_order_relaxed);
}

inline void checkNotInBadFork() {
  if (C10_UNLIKELY(inBadFork())) {
    detail::throwInBadFork();
  }
}

// Throw a clear RuntimeError when no accel device exists / when `index`
// names no existing accel device. `index` is wider than c10::DeviceIndex so
// that an index from Python is checked before it could wrap around.
void checkDeviceAvailable();
void checkDeviceIndex(int64_t index);

// The target device that stands in for accel:`index`.
c10::Device targetDevice(c10::DeviceIndex index);

} // namespace torch_accel
