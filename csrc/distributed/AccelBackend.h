#pragma once

// accel's c10d backend: torch.distributed collectives on accel tensors.
//
// accel does not implement collectives itself. It runs them on the c10d
// backend ("engine") that serves its target device type: NCCL on the CUDA
// runtime, Gloo on the host runtime. An accel tensor and a target tensor can
// share one allocation, so each collective hands the engine target tensors
// over the accel tensors' memory (never copies), and the engine reads and
// writes accel memory directly: the results are the engine's, bit for bit.
//
// Why a c10d::Backend that wraps the engine, rather than something thinner:
//  - c10d routes a collective by the device type of its tensors
//    (ProcessGroup::getBackend(PrivateUse1)), and the engines accept only
//    their own device types, so something registered for accel has to turn
//    accel tensors into target tensors: that is this class, and nothing more.
//  - The Work it returns must hand back accel tensors: DDP's reducer takes
//    the allreduced bucket from the work's future and builds the gradients
//    as views of it, so a future holding target tensors would move gradients
//    off accel. AccelWork forwards everything else to the engine's work.
//  - The engine is created in Python by the ordinary torch.distributed
//    constructors (ProcessGroupNCCL, ProcessGroupGloo) and passed in as a
//    c10d::Backend, so this code needs no NCCL or Gloo headers: it compiles
//    identically with and without CUDA, and a torch without NCCL fails when
//    the process group is created, with a clear message, not at build time.
//
// Checks the engines cannot make for accel: every tensor of a collective is
// an accel tensor (on the host runtime a cpu tensor would otherwise pass
// silently) and all are on one accel device (on the host runtime all target
// tensors are on the one cpu device).

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

namespace torch_accel {

class AccelBackend final : public c10d::Backend {
public:
  // `engine`: the target device's backend, created for the same store, rank
  // and group size.
  explicit AccelBackend(c10::intrusive_ptr<c10d::Backend> engine);

  // A group that was neither shut down nor aborted (the program did not call
  // destroy_process_group()) warns and aborts its engine, as
  // ProcessGroupNCCL's destructor does.
  ~AccelBackend() override;

  const std::string getBackendName() const override {
    return "accel";
  }

  const c10::intrusive_ptr<c10d::Backend>& engine() const {
    return engine_;
  }

  c10::intrusive_ptr<c10d::Work>
  broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work>
  allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work>
  allreduce_coalesced(std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work>
  _allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work>
  _reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output,
      at::Tensor& input,
      std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Coalescing, sequence numbers, timeouts, hooks, abort and shutdown are the
  // engine's.
  bool supportsCoalescing() const override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  void setGroupUid(const std::string& pg_uid) override;
  void registerOnCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) override;
  void waitForPendingWorks() override;
  void enableCollectivesTiming() override;
  c10d::ErrorType getError() override;
  void abort() override;
  void shutdown() override;

private:
  // The work handed back for a collective whose accel tensors are `result`,
  // all on `device`. A null engine work (the engine completed the collective
  // in order on the caller's stream, asyncOp=false) stays null.
  c10::intrusive_ptr<c10d::Work>
  wrap(c10::intrusive_ptr<c10d::Work> engine_work, std::vector<at::Tensor> result, std::optional<c10::Device> device);

  const c10::intrusive_ptr<c10d::Backend> engine_;

  // Set by shutdown() and abort(): destroy_process_group() ran.
  std::atomic<bool> terminated_{false};
  // Whether this rank says that the group was not destroyed.
  const bool warns_if_not_destroyed_;

  // While coalescing, the accel tensors of the coalesced collectives: the
  // work endCoalescing returns hands them back.
  bool coalescing_ = false;
  std::vector<at::Tensor> coalesced_result_;
  std::optional<c10::Device> coalesced_device_;
};

} // namespace torch_accel
