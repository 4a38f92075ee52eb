#include <csrc/distributed/AccelBackend.h>

#include <csrc/aten/TargetTensor.h>
#include <csrc/core/AccelDevice.h>
#include <csrc/distributed/AccelWork.h>
#include <csrc/runtime/Runtime.h>

#include <algorithm>
#include <utility>

namespace torch_accel {
namespace {

// The tensors of one collective, seen by the engine as target tensors over
// the same memory. Checks that every tensor is an accel tensor and that all
// are on one accel device, which the engine cannot check for accel.
class CollectiveTensors {
public:
  explicit CollectiveTensors(const char* collective) : collective_(collective) {}

  at::Tensor toTarget(const at::Tensor& accel) {
    check(accel);
    // The engine may keep its tensors until its work completes, after the
    // caller has dropped the accel ones: the target tensor keeps the accel
    // memory alive.
    return toTargetKeepingAlive(accel);
  }

  std::vector<at::Tensor> toTarget(const std::vector<at::Tensor>& accel) {
    std::vector<at::Tensor> targets;
    targets.reserve(accel.size());
    for (const auto& tensor : accel) {
      targets.push_back(toTarget(tensor));
    }
    return targets;
  }

  std::vector<std::vector<at::Tensor>> toTarget(const std::vector<std::vector<at::Tensor>>& accel) {
    std::vector<std::vector<at::Tensor>> targets;
    targets.reserve(accel.size());
    for (const auto& list : accel) {
      targets.push_back(toTarget(list));
    }
    return targets;
  }

  // The accel device of the collective's tensors; none if it has none.
  const std::optional<c10::Device>& device() const {
    return device_;
  }

private:
  void check(const at::Tensor& tensor) {
    TORCH_CHECK_VALUE(tensor.defined(), "accel's c10d backend: ", collective_, " got an undefined tensor");
    TORCH_CHECK_VALUE(
        tensor.device().type() == kAccel,
        "accel's c10d backend runs collectives on accel tensors only, but ",
        collective_,
        " got a tensor on ",
        tensor.device(),
        ". Give that device type a backend of its own, for example "
        "init_process_group(backend=\"cpu:gloo,accel:accel\").");
    if (!device_.has_value()) {
      device_ = tensor.device();
    }
    TORCH_CHECK(
        *device_ == tensor.device(),
        "Expected all tensors to be on the same device, but found at least two devices, ",
        *device_,
        " and ",
        tensor.device(),
        "! (",
        collective_,
        " on accel's c10d backend: a collective runs on one accel device)");
  }

  const char* collective_;
  std::optional<c10::Device> device_;
};

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> flat;
  for (const auto& list : lists) {
    flat.insert(flat.end(), list.begin(), list.end());
  }
  return flat;
}

} // namespace

AccelBackend::AccelBackend(c10::intrusive_ptr<c10d::Backend> engine)
    : c10d::Backend(engine->getRank(), engine->getSize()), engine_(std::move(engine)),
      // One rank per machine, as ProcessGroupNCCL: asked now, since the
      // destructor may run while the process exits, after the runtime.
      warns_if_not_destroyed_(getRank() % std::max<int>(runtime().deviceCount(), 1) == 0) {
  init();
}

AccelBackend::~AccelBackend() {
  if (terminated_.load()) {
    return;
  }
  // As ProcessGroupNCCL's destructor: its words, then an abort rather than a
  // shutdown, which could wait for peers of a program that is exiting. The
  // engine, aborted here, then says nothing more (NCCL's destructor warns
  // only for a group neither shut down nor aborted). Destructors must not
  // throw.
  try {
    if (warns_if_not_destroyed_) {
      TORCH_WARN_ONCE("WARNING: destroy_process_group() was not called before program exit, which can leak resources. "
                      "For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown");
    }
    engine_->abort();
  } catch (...) {
  }
}

c10::intrusive_ptr<c10d::Work> AccelBackend::wrap(
    c10::intrusive_ptr<c10d::Work> engine_work, std::vector<at::Tensor> result, std::optional<c10::Device> device) {
  if (coalescing_) {
    coalesced_result_.insert(coalesced_result_.end(), result.begin(), result.end());
    if (!coalesced_device_.has_value()) {
      coalesced_device_ = device;
    }
  }
  if (!engine_work) {
    return engine_work;
  }
  return c10::make_intrusive<AccelWork>(rank_, std::move(engine_work), std::move(result), device);
}

c10::intrusive_ptr<c10d::Work>
AccelBackend::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  CollectiveTensors accel("broadcast");
  auto targets = accel.toTarget(tensors);
  return wrap(engine_->broadcast(targets, opts), tensors, accel.device());
}

c10::intrusive_ptr<c10d::Work>
AccelBackend::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  CollectiveTensors accel("allreduce");
  auto targets = accel.toTarget(tensors);
  return wrap(engine_->allreduce(targets, opts), tensors, accel.device());
}

c10::intrusive_ptr<c10d::Work>
AccelBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  CollectiveTensors accel("allreduce_coalesced");
  auto targets = accel.toTarget(tensors);
  return wrap(engine_->allreduce_coalesced(targets, opts), tensors, accel.device());
}

c10::intrusive_ptr<c10d::Work> AccelBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  CollectiveTensors accel("reduce");
  auto targets = accel.toTarget(tensors);
  return wrap(engine_->reduce(targets, opts), tensors, accel.device());
}

c10::intrusive_ptr<c10d::Work> AccelBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  CollectiveTensors accel("allgather");
  auto target_outputs = accel.toTarget(outputs);
  auto target_inputs = accel.toTarget(inputs);
  return wrap(engine_->allgather(target_outputs, target_inputs, opts), flatten(outputs), accel.device());
}

c10::intrusive_ptr<c10d::Work>
AccelBackend::_allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  CollectiveTensors accel("allgather_into_tensor");
  auto target_output = accel.toTarget(output);
  auto target_input = accel.toTarget(input);
  return wrap(engine_->_allgather_base(target_output, target_input, opts), {output}, accel.device());
}

c10::intrusive_ptr<c10d::Work> AccelBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  CollectiveTensors accel("allgather_coalesced");
  auto target_outputs = accel.toTarget(outputs);
  auto target_inputs = accel.toTarget(inputs);
  return wrap(engine_->allgather_coalesced(target_outputs, target_inputs, opts), flatten(outputs), accel.device());
}

c10::intrusive_ptr<c10d::Work> AccelBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  CollectiveTensors accel("allgather_into_tensor_coalesced");
  auto target_outputs = accel.toTarget(outputs);
  auto target_inputs = accel.toTarget(inputs);
  return wrap(engine_->allgather_into_tensor_coalesced(target_outputs, target_inputs, opts), outputs, accel.device());
}

c10::intrusive_ptr<c10d::Work> AccelBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  CollectiveTensors accel("gather");
  auto target_outputs = accel.toTarget(outputs);
  auto target_inputs = accel.toTarget(inputs);
  return wrap(engine_->gather(target_outputs, target_inputs, opts), flatten(outputs), accel.device());
}

c10::intrusive_ptr<c10d::Work> AccelBackend::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs, const c10d::ScatterOptions& opts) {
  CollectiveTensors accel("scatter");
  auto target_outputs = accel.toTarget(outputs);
  auto target_inputs = accel.toTarget(inputs);
  return wrap(engine_->scatter(target_outputs, target_inputs, opts), outputs, accel.device());
}

c10::intrusive_ptr<c10d::Work> AccelBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  CollectiveTensors accel("reduce_scatter");
  auto target_outputs = accel.toTarget(outputs);
  auto target_inputs = accel.toTarget(inputs);
  return wrap(engine_->reduce_scatter(target_outputs, target_inputs, opts), outputs, accel.device());
}

c10::intrusive_ptr<c10d::Work>
AccelBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  CollectiveTensors accel("reduce_scatter_tensor");
  auto target_output = accel.toTarget(output);
  auto target_input = accel.toTarget(input);
  return wrap(engine_->_reduce_scatter_base(target_output, target_input, opts), {output}, accel.device());
}

c10::intrusive_ptr<c10d::Work> AccelBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  CollectiveTensors accel("reduce_scatter_tensor_coalesced");
  auto target_outputs = accel.toTarget(outputs);
  auto target_inputs = accel.toTarget(inputs);
  return wrap(engine_->reduce_scatter_tensor_coalesced(target_outputs, target_inputs, opts), outputs, accel.device());
}

c10::intrusive_ptr<c10d::Work> AccelBackend::alltoall_base(
    at::Tensor& output,
    at::Tensor& input,
    std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes,
    const c10d::AllToAllOptions& opts) {
  CollectiveTensors accel("alltoall_base");
  auto target_output = accel.toTarget(output);
  auto target_input = accel.toTarget(input);
  return wrap(
      engine_->alltoall_base(target_output, target_input, output_split_sizes, input_split_sizes, opts),
      {output},
      accel.device());
}

c10::intrusive_ptr<c10d::Work> AccelBackend::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllToAllOptions& opts) {
  CollectiveTensors accel("alltoall");
  auto target_outputs = accel.toTarget(outputs);
  auto target_inputs = accel.toTarget(inputs);
  return wrap(engine_->alltoall(target_outputs, target_inputs, opts), outputs, accel.device());
}

c10::intrusive_ptr<c10d::Work> AccelBackend::send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  CollectiveTensors accel("send");
  auto targets = accel.toTarget(tensors);
  return wrap(engine_->send(targets, dst_rank, tag), tensors, accel.device());
}

c10::intrusive_ptr<c10d::Work> AccelBackend::recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  CollectiveTensors accel("recv");
  auto targets = accel.toTarget(tensors);
  return wrap(engine_->recv(targets, src_rank, tag), tensors, accel.device());
}

c10::intrusive_ptr<c10d::Work> AccelBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  CollectiveTensors accel("recv");
  auto targets = accel.toTarget(tensors);
  return wrap(engine_->recvAnysource(targets, tag), tensors, accel.device());
}

c10::intrusive_ptr<c10d::Work> AccelBackend::barrier(const c10d::BarrierOptions& opts) {
  // Device ids name accel devices; the engine needs its target's. A barrier
  // without any runs on the device the group is bound to, if it is.
  c10d::BarrierOptions target_opts = opts;
  std::vector<int64_t> accel_ids = opts.device_ids;
  if (accel_ids.empty() && getBoundDeviceId().has_value()) {
    accel_ids.push_back(getBoundDeviceId()->index());
  }
  target_opts.device_ids.clear();
  for (const int64_t id : accel_ids) {
    checkDeviceIndex(id);
    const c10::Device target = targetDevice(static_cast<c10::DeviceIndex>(id));
    if (target.has_index()) {
      target_opts.device_ids.push_back(target.index());
    }
  }
  std::optional<c10::Device> device;
  if (opts.device.has_value() && opts.device->type() == kAccel) {
    device = c10::Device(kAccel, opts.device->has_index() ? opts.device->index() : runtime().getDevice().index());
    target_opts.device = targetDevice(device->index());
  }
  return wrap(engine_->barrier(target_opts), {}, device);
}

bool AccelBackend::supportsCoalescing() const {
  return engine_->supportsCoalescing();
}

void AccelBackend::startCoalescing() {
  engine_->startCoalescing();
  coalescing_ = true;
  coalesced_result_.clear();
  coalesced_device_.reset();
}

c10::intrusive_ptr<c10d::Work> AccelBackend::endCoalescing() {
  coalescing_ = false;
  auto result = std::move(coalesced_result_);
  coalesced_result_.clear();
  return wrap(engine_->endCoalescing(), std::move(result), std::exchange(coalesced_device_, std::nullopt));
}

void AccelBackend::setSequenceNumberForGroup() {
  engine_->setSequenceNumberForGroup();
}

uint64_t AccelBackend::getSequenceNumberForGroup() {
  return engine_->getSequenceNumberForGroup();
}

void AccelBackend::setTimeout(std::chrono::milliseconds timeout) {
  engine_->setTimeout(timeout);
}

void AccelBackend::setGroupUid(const std::string& pg_uid) {
  c10d::Backend::setGroupUid(pg_uid);
  engine_->setGroupUid(pg_uid);
}

void AccelBackend::registerOnCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) {
  engine_->registerOnCompletionHook(std::move(hook));
}

void AccelBackend::waitForPendingWorks() {
  engine_->waitForPendingWorks();
}

void AccelBackend::enableCollectivesTiming() {
  engine_->enableCollectivesTiming();
}

c10d::ErrorType AccelBackend::getError() {
  return engine_->getError();
}

void AccelBackend::abort() {
  terminated_ = true;
  engine_->abort();
}

void AccelBackend::shutdown() {
  terminated_ = true;
  engine_->shutdown();
}

} // namespace torch_accel
