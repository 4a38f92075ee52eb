#pragma once

// Graph capture (torch.accel.Graph, as torch.cuda.CUDAGraph): the work that
// accel streams are given between captureBegin() and captureEnd() becomes a
// graph that replay() runs again, on the same memory, as often as asked.
//
// Each runtime makes its own graphs (Runtime::newGraph):
//
//   CUDA  (runtime/cuda/CudaGraph)  a CUDA graph captured on the CUDA stream
//                                   behind the current accel stream, with the
//                                   caching allocator's private pools
//                                   (at::cuda::CUDAGraph).
//   host  (runtime/host/HostGraph)  accelrt runs work as it is issued, so a
//                                   capture records it instead: accel's
//                                   kernels see that their stream is being
//                                   captured (GraphRecording.h) and append a
//                                   step that replay() runs.

#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>

#include <optional>
#include <string>

namespace torch_accel {

// cudaStreamCaptureMode, by torch.cuda's names: which threads' unsafe calls
// (synchronisations, ...) a capture forbids while it runs.
enum class CaptureMode {
  Global,      // every thread's
  ThreadLocal, // the capturing thread's
  Relaxed,     // none
};

// "global", "thread_local" or "relaxed" (torch.cuda's capture_error_mode).
CaptureMode captureModeFromName(const std::string& name);

// Raises torch.cuda's error, naming accel, unless the current stream of the
// current accel device is a non-default stream (where captures begin).
void checkCaptureStream();

// A graph's claim on a shared memory pool while it captures into it. As CUDA's
// allocators, a second capture into a pool that one is capturing into is
// refused, and before the capture takes a use of the pool, so that a failed
// captureBegin() knows that everything it began is its own to end. Both
// runtimes' graphs hold one.
class SharedPoolClaim {
public:
  SharedPoolClaim() = default;
  SharedPoolClaim(const SharedPoolClaim&) = delete;
  SharedPoolClaim& operator=(const SharedPoolClaim&) = delete;
  ~SharedPoolClaim() {
    release();
  }

  // Checks that `pool` is {0, 0} (a new private pool, which needs no claim:
  // no other capture can name it before this one ends) or a pool handle, and
  // claims a shared one; raises if another graph is capturing into it.
  void claim(c10::MempoolId_t pool);
  // Gives the claim up (nothing if there is none).
  void release() noexcept;

private:
  std::optional<c10::MempoolId_t> pool_;
};

class Graph {
public:
  virtual ~Graph() = default;

  // Registers `generator`, an accel generator, with the graph (as
  // torch.cuda.CUDAGraph.register_generator_state): random work captured
  // with it draws fresh numbers from it at each replay, as eager work would.
  // The default generator of the capturing device is registered by
  // captureBegin(); others must be registered before it.
  virtual void registerGenerator(const at::Generator& generator) = 0;
  // Begins capturing the work of the current stream of the current accel
  // device, which must not be its default stream. Memory allocated on that
  // stream until captureEnd() comes from `pool` ({0, 0}: a new private pool
  // of this graph) and stays with the graph until reset().
  //
  // Neither captureBegin() nor captureEnd() leaves anything behind when it
  // fails: the capture is over (the stream no longer captures), the memory
  // allocator is out of capture mode with the graph's pool released, and the
  // generators are out of capture mode; the graph may capture again. The one
  // exception is CUDA's: captureEnd() on another stream than the capturing
  // one fails and the capture goes on.
  virtual void captureBegin(c10::MempoolId_t pool, CaptureMode mode) = 0;
  // Ends the capture, on the stream it began on.
  virtual void captureEnd() = 0;
  // Makes the captured graph ready to replay (captureEnd does it unless the
  // graph was made with keep_graph).
  virtual void instantiate() = 0;
  virtual void replay() = 0;
  // Drops the captured graph and gives its memory back.
  virtual void reset() = 0;
  // The memory pool that captureBegin(pool) of another graph may share.
  virtual c10::MempoolId_t pool() const = 0;
  virtual void enableDebugMode() = 0;
  // Writes a description of the graph to `path` (after enableDebugMode()).
  virtual void debugDump(const std::string& path) = 0;
};

} // namespace torch_accel
