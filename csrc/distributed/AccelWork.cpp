#include <csrc/distributed/AccelWork.h>

#include <ATen/core/ivalue.h>

#include <utility>

namespace torch_accel {

AccelWork::AccelWork(
    int rank,
    c10::intrusive_ptr<c10d::Work> engine_work,
    std::vector<at::Tensor> result,
    std::optional<c10::Device> device)
    : c10d::Work(rank, engine_work->retrieveOpType()), engine_work_(std::move(engine_work)), result_(std::move(result)),
      device_(device) {}

bool AccelWork::isCompleted() {
  return engine_work_->isCompleted();
}

bool AccelWork::isSuccess() const {
  return engine_work_->isSuccess();
}

std::exception_ptr AccelWork::exception() const {
  return engine_work_->exception();
}

int AccelWork::sourceRank() const {
  return engine_work_->sourceRank();
}

std::vector<at::Tensor> AccelWork::result() {
  return result_;
}

void AccelWork::synchronize() {
  engine_work_->synchronize();
}

bool AccelWork::wait(std::chrono::milliseconds timeout) {
  return engine_work_->wait(timeout);
}

void AccelWork::blockCurrentStream() {
  engine_work_->blockCurrentStream();
}

void AccelWork::abort() {
  engine_work_->abort();
}

c10::intrusive_ptr<c10::ivalue::Future> AccelWork::getFuture() {
  std::lock_guard<std::mutex> lock(future_mutex_);
  if (future_) {
    return future_;
  }
  // A future over accel devices: completing it records accel events on the
  // current accel streams, and waiting on it makes the waiter's accel streams
  // wait for them, as CUDA futures do for CUDA streams. It completes inside
  // the engine future's callback, where the current streams are those the
  // engine's completion was made visible to (on the CUDA runtime the accel
  // streams there are those same CUDA streams), so the order carries over.
  std::vector<c10::Device> devices;
  if (device_.has_value()) {
    devices.push_back(*device_);
  }
  auto future =
      c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), std::move(devices));
  engine_work_->getFuture()->addCallback([future, result = result_](c10::ivalue::Future& done) {
    if (done.hasError()) {
      future->setError(done.exception_ptr());
    } else {
      future->markCompleted(c10::IValue(result));
    }
  });
  future_ = std::move(future);
  return future_;
}

c10::intrusive_ptr<c10::ivalue::Future> AccelWork::getFutureResult() {
  return engine_work_->getFutureResult();
}

float AccelWork::getDuration() const {
  return engine_work_->getDuration();
}

uint64_t AccelWork::getSequencenumber() const {
  return engine_work_->getSequencenumber();
}

} // namespace torch_accel
