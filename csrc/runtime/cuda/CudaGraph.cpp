#include <csrc/runtime/AccelGenerator.h>
#include <csrc/runtime/cuda/CudaGraph.h>

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <cuda_runtime_api.h>

#include <exception>

namespace torch_accel {
namespace {

cudaStreamCaptureMode toCuda(CaptureMode mode) {
  switch (mode) {
  case CaptureMode::ThreadLocal:
    return cudaStreamCaptureModeThreadLocal;
  case CaptureMode::Relaxed:
    return cudaStreamCaptureModeRelaxed;
  case CaptureMode::Global:
    break;
  }
  return cudaStreamCaptureModeGlobal;
}

bool isCapturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// Runs `step` of a clean-up, which must not throw: a failure is a warning.
template <class Step> void cleanUpStep(const char* what, Step&& step) noexcept {
  try {
    step();
  } catch (const std::exception& e) {
    TORCH_WARN("accel graph: cleaning up after a failed capture, ", what, " failed: ", e.what());
  }
}

// at::cuda::CUDAGraph, and what it leaves undone when a capture fails.
//
// PyTorch 2.11's CUDAGraph cleans up after captures that succeed. When
// cudaStreamBeginCapture or cudaStreamEndCapture fails (a call the capture
// forbids invalidated it), capture_begin() or capture_end() throws with
//   - the caching allocators (device and pinned host) still allocating to
//     the graph's private pool: endAllocateToPool never runs and the pool is
//     never released. The device allocator skips process_events() while any
//     capture seems underway, so blocks freed after record_stream are never
//     reused again (memory grows to OOM under DDP and FSDP), and the filter
//     it keeps points at this graph after it is gone;
//   - the generators registered with the graph still in capture mode, so
//     eager random work on them fails ("Offset increment outside graph
//     capture encountered unexpectedly").
// reset() does not undo them either: it releases the pool only after a
// capture that ended. abandonFailedCapture() does, from the state that
// capture_begin() and capture_end() leave (the protected members).
class CleanCudaGraph final : public at::cuda::CUDAGraph {
public:
  using at::cuda::CUDAGraph::CUDAGraph;

  bool ownsCapture() const {
    return has_graph_exec_ || capture_ended_;
  }

  // Before capture_begin(): forgets what an earlier capture, reset since,
  // left in the members abandonFailedCapture() reads.
  void prepareCapture() {
    TORCH_INTERNAL_ASSERT(!ownsCapture() && !has_graph_);
    graph_ = nullptr;
    mempool_id_ = {0, 0};
    capture_id_ = 0;
  }

  // After capture_begin() or capture_end() threw (or to end a capture the
  // graph gives up): ends the capture and takes the allocators and
  // generators out of capture mode. Returns whether the capture is over.
  // With `end_underway` false, a capture that the stream still makes goes
  // on: capture_end() called on another stream or thread than the
  // capturing one fails before it ends anything, as CUDA's does.
  bool abandonFailedCapture(bool end_underway) noexcept {
    if (capture_ended_) {
      // The capture ended and only instantiating it failed: reset() gives
      // back its graph and pool, as after a successful capture.
      reset();
      return true;
    }
    if (mempool_id_ == c10::MempoolId_t{0, 0}) {
      return true; // capture_begin() failed before it touched the allocators
    }
    bool stream_captures = false;
    cleanUpStep(
        "asking whether the stream still captures", [&] { stream_captures = isCapturing(capture_stream_.stream()); });
    if (stream_captures && !end_underway) {
      return false;
    }
    if (stream_captures) {
      // capture_begin() failed after cudaStreamBeginCapture, or the graph
      // gives the capture up: end it.
      cleanUpStep("ending the capture", [&] {
        cudaGraph_t discarded = nullptr;
        const cudaError_t error = cudaStreamEndCapture(capture_stream_.stream(), &discarded);
        (void)cudaGetLastError(); // an invalidated capture's error is no one's
        if (error == cudaSuccess && discarded != nullptr) {
          C10_CUDA_CHECK(cudaGraphDestroy(discarded));
        }
      });
    }
    // capture_end() takes the allocators out of capture mode right after a
    // cudaStreamEndCapture that succeeded, which is what sets graph_.
    if (graph_ == nullptr) {
      cleanUpStep("ending the device allocator's capture mode", [&] {
        c10::cuda::CUDACachingAllocator::endAllocateToPool(capture_dev_, mempool_id_);
      });
      cleanUpStep("ending the pinned host allocator's capture mode", [&] {
        at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(mempool_id_);
      });
    } else {
      cleanUpStep("destroying the captured graph", [&] { C10_CUDA_CHECK(cudaGraphDestroy(graph_)); });
      graph_ = nullptr;
    }
    // beginAllocateToPool took one use of the pool: the pool is freed once
    // nothing allocated in it is alive any more.
    cleanUpStep(
        "releasing the device pool", [&] { c10::cuda::CUDACachingAllocator::releasePool(capture_dev_, mempool_id_); });
    cleanUpStep("releasing the pinned host pool", [&] { at::getHostAllocator(at::kCUDA)->release_pool(mempool_id_); });
    // What CUDAGeneratorState::capture_epilogue() does, less the increment
    // it returns (nothing replays); it is not exported from libtorch_cuda.
    for (auto& entry : captured_generator_states_) {
      entry.first->capturing_ = false;
    }
    mempool_id_ = {0, 0};
    capture_id_ = 0;
    return true;
  }
};

class CudaGraph final : public Graph {
public:
  explicit CudaGraph(bool keep_graph) : graph_(keep_graph) {}

  ~CudaGraph() override {
    abandonCapture();
  }

  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void registerGenerator(const at::Generator& generator) override {
    // CUDAGraph checks that no capture runs on the current stream.
    graph_.register_generator_state(targetGenerator(generator));
  }

  void captureBegin(c10::MempoolId_t pool, CaptureMode mode) override {
    checkCaptureStream(); // CUDAGraph checks it too, with CUDA's name
    TORCH_CHECK(
        !graph_.ownsCapture(),
        "This accel Graph instance already owns a captured graph. To capture a new graph, create a new instance.");
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
    TORCH_CHECK(
        !isCapturing(stream.stream()),
        "accel graph: the current stream (accel:",
        static_cast<int>(stream.device_index()),
        ") is already capturing a graph; end that capture before beginning another on it");
    // CUDAGraph makes CUDA's default generator graph-safe by itself; accel's
    // default generator wraps a CUDA generator of its own, which must be
    // registered too (before the capture begins), so that random work in the
    // graph draws fresh numbers at each replay. Registering twice is harmless.
    graph_.register_generator_state(targetGenerator(defaultAccelGenerator(stream.device_index())));
    pool_claim_.claim(pool);
    graph_.prepareCapture();
    try {
      graph_.capture_begin(pool, toCuda(mode));
    } catch (...) {
      graph_.abandonFailedCapture(/*end_underway=*/true);
      pool_claim_.release();
      throw;
    }
    capturing_ = true;
  }

  void captureEnd() override {
    try {
      graph_.capture_end();
    } catch (...) {
      if (graph_.abandonFailedCapture(/*end_underway=*/false)) {
        capturing_ = false;
        pool_claim_.release();
      }
      throw;
    }
    capturing_ = false;
    pool_claim_.release();
  }

  void instantiate() override {
    graph_.instantiate();
  }

  void replay() override {
    graph_.replay();
  }

  void reset() override {
    abandonCapture(); // as on the host runtime: a capture underway ends
    graph_.reset();
  }

  c10::MempoolId_t pool() const override {
    return graph_.pool();
  }

  void enableDebugMode() override {
    graph_.enable_debug_mode();
  }

  void debugDump(const std::string& path) override {
    graph_.debug_dump(path);
  }

private:
  // Ends a capture still underway (the graph is reset or destroyed while
  // capturing): CUDAGraph would leave the allocators pointing at it.
  void abandonCapture() noexcept {
    if (capturing_) {
      graph_.abandonFailedCapture(/*end_underway=*/true);
      capturing_ = false;
    }
    pool_claim_.release();
  }

  // pool() is not const in CUDAGraph.
  mutable CleanCudaGraph graph_;
  // Between a captureBegin() and the captureEnd() that ends the capture.
  bool capturing_ = false;
  // The shared pool this graph is capturing into, while it captures.
  SharedPoolClaim pool_claim_;
};

} // namespace

std::unique_ptr<Graph> newCudaGraph(bool keep_graph) {
  return std::make_unique<CudaGraph>(keep_graph);
}

bool isCudaStreamCapturing(const c10::Stream& stream) {
  if (!at::detail::getCUDAHooks().hasPrimaryContext(stream.device_index())) {
    return false;
  }
  const c10::cuda::CUDAStream cuda(
      c10::cuda::CUDAStream::UNCHECKED,
      c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::CUDA, stream.device_index()), stream.id()));
  return isCapturing(cuda.stream());
}

} // namespace torch_accel
