// A graph on the host runtime: the steps that accel's kernels recorded while
// the capturing stream's work was being captured (GraphRecording.h), run
// again in order by replay().
//
// A step holds the accel tensors it reads and writes (over the same
// storages, with the sizes and strides they had when it was recorded), so
// the memory that the capture allocated or used stays alive with the graph
// and no other allocation can take it while the graph may replay: that is
// the graph's private memory pool, which reset() or the graph's end gives
// back. Graphs that share a pool id each keep their own memory, except in a
// torch.accel.MemPool: a capture into one (pool=mem_pool.id) allocates on
// the capturing stream from the pool (HostMemoryLedger), which keeps the
// memory the graph's steps free for the pool's later allocations, and the
// graph holds a use of the pool until reset() or its end, as on CUDA.

#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/AccelGenerator.h>
#include <csrc/runtime/GraphRecording.h>
#include <csrc/runtime/Runtime.h>
#include <csrc/runtime/host/HostGraph.h>
#include <csrc/runtime/host/HostMemoryLedger.h>

#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace torch_accel {
namespace {

// Graph ids name graphs' own pools ({id, 0}); pool handles are {0, id}
// (the scheme of at::cuda::CUDAGraph, so pool ids look alike on both runtimes).
std::atomic<c10::CaptureId_t> nextGraphId{1};
std::atomic<c10::CaptureId_t> nextPoolHandle{1};

class HostGraph final : public Graph, public RecordingCapture {
public:
  explicit HostGraph(bool keep_graph) : id_(nextGraphId++), keep_graph_(keep_graph) {}

  ~HostGraph() override {
    stopRecording(this);
    pool_claim_.release();
    try {
      stopRouting();
      releaseMemPool();
    } catch (const std::exception& e) {
      TORCH_WARN("accel graph: could not give its memory pool back: ", e.what());
    }
  }

  HostGraph(const HostGraph&) = delete;
  HostGraph& operator=(const HostGraph&) = delete;

  // --- Graph --------------------------------------------------------------

  void registerGenerator(const at::Generator& generator) override {
    // A replay runs each recorded random operator again with the generator
    // it was given, which draws fresh numbers from it as eager work does
    // (see csrc/graphs/GraphCapture.cpp): there is nothing to register, only CUDA's
    // conditions to check.
    (void)targetGenerator(generator); // an accel generator, as CUDA wants a CUDA one
    TORCH_CHECK(
        !(anyCaptureRecording() && recordingCaptureOnCurrentStream(runtime().getDevice().index()) != nullptr),
        "accel graph: cannot register a generator while the current stream is capturing (CUDA: Cannot register the "
        "state during capturing stage); register it before capture_begin()");
  }

  void captureBegin(c10::MempoolId_t pool, CaptureMode /*mode*/) override {
    // Every mode forbids the same operations on the host runtime: those that
    // need the results of the recorded work (see GraphRecording.h), which
    // CUDA forbids in every mode too. The modes differ on CUDA only for
    // calls (cudaMalloc, ...) that accelrt never makes.
    TORCH_CHECK(
        !capturing_ && !capture_ended_,
        "This accel Graph instance already owns a captured graph. To capture a new graph, create a new instance.");
    checkCaptureStream();
    const c10::Stream stream = runtime().getStream(runtime().getDevice());
    pool_claim_.claim(pool);
    try {
      startRecording(stream, this);
    } catch (...) {
      pool_claim_.release();
      throw;
    }
    pool_ = pool != c10::MempoolId_t{0, 0} ? pool : c10::MempoolId_t{id_, 0};
    auto& ledger = hostMemoryLedger();
    if (pool != c10::MempoolId_t{0, 0} && ledger.hasPool(pool)) {
      void* const handle = runtime().getStreamNativeHandle(stream);
      ledger.beginAllocateToPool(stream.device_index(), pool, [handle](void* s) { return s == handle; });
      mem_pool_ = pool;
      mem_pool_device_ = stream.device_index();
      routing_ = true;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      invalidated_ = false;
      failure_.clear();
      steps_.clear();
    }
    capture_stream_ = stream;
    capturing_ = true;
  }

  void captureEnd() override {
    TORCH_CHECK(capturing_, "accel Graph: capture_end() without capture_begin()");
    const c10::Stream stream = runtime().getStream(runtime().getDevice());
    TORCH_CHECK(stream == capture_stream_, "Capture must end on the same stream it began on.");
    stopRecording(this);
    stopRouting();
    capturing_ = false;
    pool_claim_.release();
    std::string failure;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (invalidated_) {
        steps_.clear();
        failure = failure_;
      }
    }
    TORCH_CHECK(
        failure.empty(),
        "accel graph capture failed: the capture was invalidated by an error during capture (CUDA: operation "
        "failed due to a previous error during capture). The error: ",
        failure);
    capture_ended_ = true;
    if (!keep_graph_) {
      instantiate();
    }
  }

  void instantiate() override {
    TORCH_CHECK(capture_ended_, "accel Graph: instantiate() without a preceding successful capture.");
    instantiated_ = true;
  }

  void replay() override {
    TORCH_CHECK(capture_ended_, "Called accel Graph::replay without a preceding successful capture.");
    if (!instantiated_) {
      instantiate();
    }
    // Steps record themselves if their stream is being captured, but the
    // copies into this graph's results would run at once: not supported.
    TORCH_CHECK(
        !(anyCaptureRecording() && recordingCaptureOnCurrentStream(runtime().getDevice().index()) != nullptr),
        "accel (host runtime): replaying a graph while the current stream is capturing another is not supported");
    for (const Step& step : steps_) {
      c10::DeviceGuard guard(c10::Device(kAccel, step.device));
      step.run();
    }
  }

  void reset() override {
    if (capturing_) {
      stopRecording(this);
      stopRouting();
      capturing_ = false;
      pool_claim_.release();
    }
    std::vector<Step> steps;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      steps.swap(steps_); // freed outside the lock: their tensors' memory goes back
    }
    steps.clear();
    releaseMemPool();
    capture_ended_ = false;
    instantiated_ = false;
  }

  c10::MempoolId_t pool() const override {
    TORCH_CHECK(capture_ended_, "Called accel Graph::pool() without a preceding successful capture.");
    return pool_;
  }

  void enableDebugMode() override {
    debug_ = true;
  }

  void debugDump(const std::string& path) override {
    if (!debug_) {
      TORCH_WARN("accel Graphs debug not enabled, set with [graph].enable_debug_mode()");
      return;
    }
    TORCH_CHECK(capture_ended_, "accel Graph: debug_dump() without a preceding successful capture.");
    std::ofstream out(path);
    TORCH_CHECK(out, "accel Graph: cannot write the debug dump to ", path);
    out << "accel graph (host runtime): " << steps_.size() << " recorded steps, pool (" << pool_.first << ", "
        << pool_.second << ")\n";
    for (size_t i = 0; i < steps_.size(); ++i) {
      out << i << '\t' << steps_[i].name << "\taccel:" << static_cast<int>(steps_[i].device) << '\n';
    }
  }

  // --- RecordingCapture ------------------------------------------------------

  void record(std::string name, c10::DeviceIndex device, std::function<void()> step) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (invalidated_) {
      lock.unlock();
      checkValid();
    }
    steps_.push_back(Step{std::move(name), device, std::move(step)});
  }

  void invalidate(const std::string& message) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!invalidated_) {
      invalidated_ = true;
      failure_ = message;
    }
  }

  void checkValid() override {
    std::string failure;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!invalidated_) {
        return;
      }
      failure = failure_;
    }
    TORCH_CHECK(
        false,
        "accel: this stream's graph capture was invalidated by an earlier error and records nothing more; end it "
        "with capture_end() (CUDA: operation failed due to a previous error during capture). The error: ",
        failure);
  }

private:
  struct Step {
    std::string name;
    c10::DeviceIndex device;
    std::function<void()> run;
  };

  // Ends the routing of the capturing stream's allocations to the MemPool.
  void stopRouting() {
    if (routing_) {
      routing_ = false;
      hostMemoryLedger().endAllocateToPool(mem_pool_device_, mem_pool_);
    }
  }

  // Gives back the use of the MemPool that the capture took.
  void releaseMemPool() {
    if (mem_pool_ != c10::MempoolId_t{0, 0}) {
      const auto pool = mem_pool_;
      mem_pool_ = {0, 0};
      hostMemoryLedger().releasePool(pool);
    }
  }

  const c10::CaptureId_t id_;
  const bool keep_graph_;
  c10::MempoolId_t pool_{0, 0};
  // The shared pool this graph is capturing into, while it captures.
  SharedPoolClaim pool_claim_;
  // The torch.accel.MemPool the capture allocated from ({0, 0}: none), whose
  // use the graph holds until reset(), and whether allocations are routed to it.
  c10::MempoolId_t mem_pool_{0, 0};
  c10::DeviceIndex mem_pool_device_ = 0;
  bool routing_ = false;
  c10::Stream capture_stream_{c10::Stream::DEFAULT, c10::Device(kAccel, 0)};
  bool capturing_ = false;
  bool capture_ended_ = false;
  bool instantiated_ = false;
  bool debug_ = false;

  // Recording may come from any thread that issues work on the stream.
  std::mutex mutex_;
  std::vector<Step> steps_;
  bool invalidated_ = false;
  std::string failure_;
};

} // namespace

std::unique_ptr<Graph> newHostGraph(bool keep_graph) {
  return std::make_unique<HostGraph>(keep_graph);
}

c10::MempoolId_t hostGraphPoolHandle() {
  return {0, nextPoolHandle++};
}

} // namespace torch_accel
