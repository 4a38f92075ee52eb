#include <csrc/runtime/AccelGenerator.h>
#include <csrc/runtime/cuda/CudaGraph.h>

#include <ATen/cuda/CUDAGraph.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <cuda_runtime_api.h>

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

class CudaGraph final : public Graph {
public:
  explicit CudaGraph(bool keep_graph) : graph_(keep_graph) {}

  void captureBegin(c10::MempoolId_t pool, CaptureMode mode) override {
    checkCaptureStream(); // CUDAGraph checks it too, with CUDA's name
    // CUDAGraph makes CUDA's default generator graph-safe by itself; accel's
    // default generator wraps a CUDA generator of its own, which must be
    // registered too (before the capture begins), so that random work in the
    // graph draws fresh numbers at each replay. Registering twice is harmless.
    graph_.register_generator_state(targetGenerator(defaultAccelGenerator(c10::cuda::current_device())));
    graph_.capture_begin(pool, toCuda(mode));
  }

  void captureEnd() override {
    graph_.capture_end();
  }

  void instantiate() override {
    graph_.instantiate();
  }

  void replay() override {
    graph_.replay();
  }

  void reset() override {
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
  // pool() is not const in CUDAGraph.
  mutable at::cuda::CUDAGraph graph_;
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
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(cuda.stream(), &status));
  return status != cudaStreamCaptureStatusNone;
}

} // namespace torch_accel
