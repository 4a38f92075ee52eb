#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <mutex>
#include <optional>
#include <vector>

namespace torch_accel {

// The Work of a collective that accel's c10d backend ran on its engine.
//
// Completion, waiting and errors are the engine's own (wait() keeps the
// engine's stream semantics: on the CUDA runtime the current CUDA stream, which
// is the current accel stream, waits for NCCL's). What differs is what the work
// hands back: result() and the future's value are the caller's accel tensors,
// not the target tensors the engine saw, so code that consumes them (DDP's
// reducer builds gradient views from the future's value) stays on accel.
class AccelWork final : public c10d::Work {
public:
  // `result`: the collective's accel tensors (its outputs, or the tensors it
  // works in place on), all on `device` (none for a barrier).
  AccelWork(
      int rank,
      c10::intrusive_ptr<c10d::Work> engine_work,
      std::vector<at::Tensor> result,
      std::optional<c10::Device> device);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout) override;
  void blockCurrentStream() override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFutureResult() override;
  float getDuration() const override;
  uint64_t getSequencenumber() const override;

private:
  const c10::intrusive_ptr<c10d::Work> engine_work_;
  const std::vector<at::Tensor> result_;
  const std::optional<c10::Device> device_;
  std::mutex future_mutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

} // namespace torch_accel
