#include <csrc/aten/AliasFallback.h>
#include <csrc/aten/TargetTensor.h>
#include <csrc/core/AccelDevice.h>
#include <csrc/graphs/GraphCapture.h>
#include <csrc/profiler/DeviceActivity.h>
#include <csrc/runtime/Runtime.h>

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace torch_accel {
namespace {

template <typename Fn> void forEachTensor(const c10::IValue& value, Fn&& fn) {
  if (value.isTensor()) {
    fn(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorList()) {
      fn(tensor);
    }
  } else if (value.isOptionalTensorList()) {
    for (const std::optional<at::Tensor>& tensor : value.toOptionalTensorList()) {
      if (tensor.has_value()) {
        fn(*tensor);
      }
    }
  }
}

// `value` with each tensor replaced by fn(tensor) (lists rebuilt).
template <typename Fn> c10::IValue mapTensors(const c10::IValue& value, Fn&& fn) {
  if (value.isTensor()) {
    return fn(value.toTensor());
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> mapped;
    for (const at::Tensor& tensor : value.toTensorList()) {
      mapped.push_back(fn(tensor));
    }
    return mapped;
  }
  if (value.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> mapped;
    for (const std::optional<at::Tensor>& tensor : value.toOptionalTensorList()) {
      mapped.push_back(tensor.has_value() ? std::optional<at::Tensor>(fn(*tensor)) : std::nullopt);
    }
    return mapped;
  }
  return value;
}

// A tensor over `storage` with `like`'s sizes, strides, offset, dtype and
// conjugate/negative bits, and no autograd: what a recorded step holds (the
// tensor as it was when recorded) and what Meta kernels see of an argument.
at::Tensor over(c10::Storage storage, const at::Tensor& like, c10::DispatchKey key) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::TensorImpl::VIEW, std::move(storage), c10::DispatchKeySet(key), like.dtype());
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  impl->_set_conj(like.is_conj());
  impl->_set_neg(like.is_neg());
  return at::Tensor(std::move(impl));
}

at::Tensor snapshotOf(const at::Tensor& accel) {
  return over(accel.storage(), accel, c10::DispatchKey::PrivateUse1);
}

// What a step keeps of a tensor argument: accel tensors as they are now; a
// CPU scalar's value (a CUDA graph keeps the value it was launched with, not
// the host memory it came from); other tensors themselves.
at::Tensor heldForReplay(const at::Tensor& tensor) {
  if (isAccel(tensor)) {
    return snapshotOf(tensor);
  }
  if (tensor.defined() && tensor.device().is_cpu() && tensor.dim() == 0) {
    at::Tensor value = tensor.clone();
    value.unsafeGetTensorImpl()->set_wrapped_number(tensor.unsafeGetTensorImpl()->is_wrapped_number());
    return value;
  }
  return tensor;
}

c10::Storage metaStorage(size_t nbytes) {
  return at::empty({static_cast<int64_t>(nbytes)}, at::TensorOptions().dtype(at::kByte).device(at::kMeta)).storage();
}

// New accel memory on accel:`device` for a result whose Meta kernel made `meta`.
c10::Storage accelStorage(const c10::Storage& meta, c10::DeviceIndex device) {
  c10::DeviceGuard guard(c10::Device(kAccel, device));
  const size_t nbytes = meta.nbytes();
  return c10::Storage(
      c10::Storage::use_byte_size_t(),
      nbytes,
      runtime().allocator()->allocate(nbytes),
      runtime().allocator(),
      /*resizable=*/true);
}

// One operator call being recorded.
class RecordedCall {
public:
  RecordedCall(RecordingCapture& capture, const c10::OperatorHandle& op, c10::DeviceIndex device)
      : capture_(capture), device_(device), name_(c10::toString(op.operator_name())) {}

  [[noreturn]] void fail(const std::string& why) {
    capture_.fail(c10::str("accel graph capture cannot record the operator '", name_, "': ", why));
  }

  // The Meta kernel's view of an accel argument: one meta storage per accel
  // storage, so that results sharing an argument's storage are seen.
  at::Tensor metaOf(const at::Tensor& tensor) {
    if (!isAccel(tensor)) {
      return tensor;
    }
    if (tensor.layout() != at::kStrided || tensor.is_quantized()) {
      fail(c10::str("it takes a ", tensor.layout(), " tensor; only strided accel tensors can be captured"));
    }
    // The same tensor twice (self and out=self) is the same meta tensor.
    for (const auto& [accel, meta] : arguments_) {
      if (accel.unsafeGetTensorImpl() == tensor.unsafeGetTensorImpl()) {
        return meta;
      }
    }
    const c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
    const c10::Storage* meta_storage = nullptr;
    for (const auto& [accel, meta] : storages_) {
      if (accel.unsafeGetStorageImpl() == storage) {
        meta_storage = &meta;
      }
    }
    if (meta_storage == nullptr) {
      storages_.emplace_back(tensor.storage(), metaStorage(tensor.storage().nbytes()));
      meta_storage = &storages_.back().second;
    }
    arguments_.emplace_back(tensor, over(*meta_storage, tensor, c10::DispatchKey::Meta));
    return arguments_.back().second;
  }

  // The accel result for `meta`, a result of the Meta kernel.
  at::Tensor resultFor(const at::Tensor& meta) {
    if (!meta.defined()) {
      return meta;
    }
    if (meta.device().type() != c10::DeviceType::Meta) {
      fail(c10::str("its Meta kernel returned a ", meta.device(), " tensor"));
    }
    for (const auto& [accel, meta_argument] : arguments_) {
      if (meta_argument.unsafeGetTensorImpl() == meta.unsafeGetTensorImpl()) {
        return accel; // in-place and out= results are their argument
      }
    }
    const c10::StorageImpl* storage = meta.storage().unsafeGetStorageImpl();
    for (const auto& [accel, meta_storage] : storages_) {
      if (meta_storage.unsafeGetStorageImpl() == storage) {
        return over(accel, meta, c10::DispatchKey::PrivateUse1); // a view of an argument
      }
    }
    for (const auto& [meta_storage, accel] : fresh_storages_) {
      if (meta_storage.unsafeGetStorageImpl() == storage) {
        return freshResult(accel, meta);
      }
    }
    fresh_storages_.emplace_back(meta.storage(), accelStorage(meta.storage(), device_));
    return freshResult(fresh_storages_.back().second, meta);
  }

  // Mutable arguments that the Meta kernel resized (an out= tensor of the
  // wrong size) are resized alike, into new accel memory where they grew.
  void resizeMutableArguments() {
    for (const auto& [accel, meta] : arguments_) {
      c10::StorageImpl* accel_storage = accel.storage().unsafeGetStorageImpl();
      if (meta.storage().nbytes() > accel_storage->nbytes()) {
        c10::Storage grown = accelStorage(meta.storage(), device_);
        accel_storage->set_data_ptr_noswap(grown.unsafeGetStorageImpl()->set_data_ptr(c10::DataPtr()));
        accel_storage->set_nbytes(grown.nbytes());
      }
      if (meta.sizes() != accel.sizes() || meta.strides() != accel.strides() ||
          meta.storage_offset() != accel.storage_offset()) {
        accel.unsafeGetTensorImpl()->set_sizes_and_strides(meta.sizes(), meta.strides(), meta.storage_offset());
      }
    }
  }

  // Results that replay() copies into: (return, list position, accel memory).
  struct FreshResult {
    size_t result;
    size_t position;
    at::Tensor accel;
  };
  std::vector<FreshResult> fresh_results;

  void noteFresh(const at::Tensor& accel, size_t result, size_t position) {
    for (const auto& [impl, meta] : fresh_) {
      if (accel.unsafeGetTensorImpl() == impl) {
        fresh_results.push_back(FreshResult{result, position, snapshotOf(accel)});
        return;
      }
    }
  }

private:
  at::Tensor freshResult(const c10::Storage& storage, const at::Tensor& meta) {
    // The constructor adds autograd keys (unless in inference mode), as for
    // any new accel tensor.
    auto impl = c10::make_intrusive<c10::TensorImpl>(
        c10::Storage(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), meta.dtype());
    impl->set_sizes_and_strides(meta.sizes(), meta.strides(), meta.storage_offset());
    at::Tensor result(std::move(impl));
    fresh_.emplace_back(result.unsafeGetTensorImpl(), meta);
    return result;
  }

  RecordingCapture& capture_;
  const c10::DeviceIndex device_;
  const std::string name_;
  // Accel argument storages and the meta storages standing for them.
  std::vector<std::pair<c10::Storage, c10::Storage>> storages_;
  // Accel tensor arguments and the meta tensors standing for them.
  std::vector<std::pair<at::Tensor, at::Tensor>> arguments_;
  // Meta result storages and the accel memory given to them.
  std::vector<std::pair<c10::Storage, c10::Storage>> fresh_storages_;
  std::vector<std::pair<const c10::TensorImpl*, at::Tensor>> fresh_;
};

// The accel device of a call: its first accel tensor's, else an accel device
// argument's, else the current one.
c10::DeviceIndex callDevice(c10::ArrayRef<c10::IValue> arguments) {
  c10::DeviceIndex device = -1;
  for (const c10::IValue& value : arguments) {
    forEachTensor(value, [&](const at::Tensor& tensor) {
      if (device < 0 && isAccel(tensor)) {
        device = tensor.device().index();
      }
    });
    if (device >= 0) {
      return device;
    }
  }
  for (const c10::IValue& value : arguments) {
    if (value.isDevice() && value.toDevice().type() == kAccel && value.toDevice().has_index()) {
      return value.toDevice().index();
    }
  }
  return runtime().getDevice().index();
}

bool returnsOnlyTensors(const c10::FunctionSchema& schema) {
  for (const auto& result : schema.returns()) {
    const auto& type = result.type();
    const bool tensor = type->kind() == c10::TypeKind::TensorType ||
                        (type->kind() == c10::TypeKind::ListType &&
                         type->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::TensorType);
    if (!tensor) {
      return false;
    }
  }
  return true;
}

// Convolutions choose their results' memory format by the device they run
// on (channels-last where mkldnn or cuDNN prefer it for the input or the
// weight), which their Meta kernel, seeing meta tensors, cannot know. For
// them, capture runs the target's kernel once on scratch tensors with the
// arguments' sizes and strides, and the results take its layout, so that
// what a capture hands out is laid out as eager's (and as Inductor asserts).
bool resultLayoutDependsOnDevice(const c10::OperatorHandle& op) {
  const std::string& name = op.schema().name();
  return name == "aten::convolution" || name == "aten::_convolution" || name == "aten::convolution_backward";
}

void layResultsOutAsTarget(
    const c10::OperatorHandle& op,
    const torch::jit::Stack& stack,
    size_t begin,
    size_t count,
    torch::jit::Stack& meta_results,
    c10::DispatchKey target_key,
    c10::DeviceIndex device) {
  const c10::Device target = targetDevice(device);
  torch::jit::Stack scratch;
  scratch.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    scratch.push_back(mapTensors(stack[begin + i], [&](const at::Tensor& tensor) {
      if (!isAccel(tensor)) {
        return tensor;
      }
      return at::empty_strided(tensor.sizes(), tensor.strides(), tensor.options().device(target)).zero_();
    }));
  }
  op.redispatchBoxed(c10::DispatchKeySet(target_key), &scratch);
  TORCH_INTERNAL_ASSERT(scratch.size() == meta_results.size());
  for (size_t r = 0; r < meta_results.size(); ++r) {
    std::vector<at::Tensor> laid_out;
    forEachTensor(scratch[r], [&](const at::Tensor& tensor) { laid_out.push_back(tensor); });
    size_t position = 0;
    meta_results[r] = mapTensors(meta_results[r], [&](const at::Tensor& meta) {
      const at::Tensor& like = laid_out.at(position++);
      if (!meta.defined() || !like.defined() || meta.sizes() != like.sizes() || meta.strides() == like.strides()) {
        return meta;
      }
      return at::empty_strided(like.sizes(), like.strides(), meta.options());
    });
  }
}

// The step that replays one recorded operator call.
//
// A graph's memory does not move while it may replay, so most calls replay
// at the target's level: the target views of their accel arguments (and of
// the memory their fresh results are copied into) are made at the first
// replay and kept, and each replay calls the target's kernel on them
// directly, without the alias fallback's work per call (mapping arguments,
// device checks, mapping results). The views are made again if an accel
// storage's memory was replaced since (a later recorded call that resized
// it, Storage.resize_()). Calls that draw random numbers or take devices or
// generators replay through the alias fallback, which lends them the accel
// generator's state at each replay (fresh numbers, as CUDA's graph-safe
// generators give).
class ReplayedCall {
public:
  ReplayedCall(
      const c10::OperatorHandle& op,
      c10::DispatchKey target_key,
      c10::DeviceIndex device,
      std::vector<c10::IValue> arguments,
      std::vector<RecordedCall::FreshResult> fresh)
      : op_(op), target_key_(target_key), device_(device), arguments_(std::move(arguments)), fresh_(std::move(fresh)),
        on_target_(
            !op.hasTag(at::Tag::nondeterministic_seeded) &&
            std::none_of(arguments_.begin(), arguments_.end(), [](const c10::IValue& value) {
              return value.isGenerator() || value.isDevice();
            })) {}

  void operator()() {
    if (!on_target_) {
      replayThroughFallback();
      return;
    }
    if (!targetViewsCurrent()) {
      makeTargetViews();
    }
    torch::jit::Stack replay(target_arguments_.begin(), target_arguments_.end());
    {
      RecordDeviceActivity kernel(name(), device_);
      op_.redispatchBoxed(c10::DispatchKeySet(target_key_), &replay);
    }
    for (size_t i = 0; i < fresh_.size(); ++i) {
      target_fresh_[i].copy_(computed(replay, fresh_[i]));
    }
  }

private:
  static const at::Tensor& computed(const torch::jit::Stack& results, const RecordedCall::FreshResult& fresh) {
    const c10::IValue& value = results[fresh.result];
    return value.isTensor() ? value.toTensor() : value.toTensorList().get(fresh.position);
  }

  const std::string& name() const {
    if (name_.empty()) {
      name_ = c10::toString(op_.operator_name());
    }
    return name_;
  }

  void replayThroughFallback() {
    torch::jit::Stack replay(arguments_.begin(), arguments_.end());
    runOnTarget(op_, &replay, target_key_);
    for (const auto& fresh : fresh_) {
      at::Tensor dst = toTarget(fresh.accel);
      dst.copy_(toTarget(computed(replay, fresh)));
    }
  }

  // Whether each target view is still over its accel storage's memory.
  bool targetViewsCurrent() const {
    if (!prepared_) {
      return false;
    }
    for (const auto& [storage, data] : viewed_) {
      if (storage->data() != data) {
        return false;
      }
    }
    return true;
  }

  void makeTargetViews() {
    viewed_.clear();
    // One target storage per accel storage, as the fallback makes them (see
    // TargetCall.h): kernels' overlap checks see what they would on the target.
    std::vector<std::pair<const c10::StorageImpl*, at::Tensor>> targets;
    auto view = [&](const at::Tensor& tensor) -> at::Tensor {
      if (!isAccel(tensor)) {
        return tensor;
      }
      const c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
      for (const auto& [viewed, target] : targets) {
        if (viewed == storage) {
          return toTargetSharingStorage(tensor, target);
        }
      }
      at::Tensor target = toTarget(tensor);
      targets.emplace_back(storage, target);
      viewed_.emplace_back(storage, tensor.storage().data());
      return target;
    };
    target_arguments_.clear();
    target_arguments_.reserve(arguments_.size());
    for (const c10::IValue& argument : arguments_) {
      target_arguments_.push_back(mapTensors(argument, view));
    }
    target_fresh_.clear();
    for (const auto& fresh : fresh_) {
      target_fresh_.push_back(view(fresh.accel));
    }
    prepared_ = true;
  }

  c10::OperatorHandle op_;
  c10::DispatchKey target_key_;
  c10::DeviceIndex device_;
  // The call's arguments as recorded (accel tensors: see heldForReplay),
  // which keep its memory alive.
  std::vector<c10::IValue> arguments_;
  std::vector<RecordedCall::FreshResult> fresh_;
  bool on_target_;
  mutable std::string name_;
  // At the target's level (on_target_): the arguments, the memory fresh
  // results are copied into, and each accel storage viewed with the memory
  // its views were made over.
  std::vector<c10::IValue> target_arguments_;
  std::vector<at::Tensor> target_fresh_;
  bool prepared_ = false;
  std::vector<std::pair<const c10::StorageImpl*, const void*>> viewed_;
};

void record(
    RecordingCapture& capture,
    const c10::OperatorHandle& op,
    torch::jit::Stack* stack,
    c10::DispatchKey target_key,
    c10::DeviceIndex device) {
  const auto& schema = op.schema();
  const size_t count = schema.arguments().size();
  const size_t begin = stack->size() - count;
  RecordedCall call(capture, op, device);
  if (target_key != targetDispatchKey()) {
    call.fail("only operators on strided accel tensors can be captured");
  }
  if (!returnsOnlyTensors(schema)) {
    call.fail("it returns a value read from device memory, which is not known until the graph runs (CUDA graphs "
              "cannot capture such a read either)");
  }
  if (!op.hasComputedKernelForDispatchKey(c10::DispatchKey::Meta)) {
    call.fail("it has no Meta kernel, which capture needs to know its results' shapes without running it");
  }
  // The Meta kernel's arguments.
  torch::jit::Stack meta_stack;
  meta_stack.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const c10::IValue& value = (*stack)[begin + i];
    if (value.isDevice() && value.toDevice().type() == kAccel) {
      meta_stack.emplace_back(c10::Device(c10::DeviceType::Meta));
    } else if (value.isGenerator()) {
      meta_stack.emplace_back(); // Meta kernels draw nothing
    } else {
      meta_stack.push_back(mapTensors(value, [&](const at::Tensor& tensor) { return call.metaOf(tensor); }));
    }
  }
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
  } catch (const c10::NotImplementedError& e) {
    call.fail(
        c10::str("its Meta kernel cannot tell its results without device data (", e.what_without_backtrace(), ")"));
  } catch (const c10::Error&) {
    // A check on the arguments (shapes, dtypes) that the target's kernel
    // makes too: the same error as eager, and the capture goes on, as a
    // CUDA capture does when a kernel refuses its arguments before launch.
    throw;
  } catch (const std::exception& e) {
    // Meta kernels written in Python (torch._refs, torch._meta_registrations)
    // raise Python exceptions, whose message starts with the type's name:
    // NotImplementedError where results depend on data (nonzero); any other
    // is a check on the arguments, raised as is.
    const std::string_view message(e.what());
    if (message.rfind("NotImplementedError", 0) == 0) {
      call.fail(c10::str("its Meta kernel cannot tell its results without device data (", message, ")"));
    }
    throw;
  }
  call.resizeMutableArguments();
  if (resultLayoutDependsOnDevice(op)) {
    layResultsOutAsTarget(op, *stack, begin, count, meta_stack, target_key, device);
  }
  // Results, and the step that replays the call.
  c10::SmallVector<c10::IValue, 2> results;
  for (size_t r = 0; r < meta_stack.size(); ++r) {
    results.push_back(mapTensors(meta_stack[r], [&](const at::Tensor& meta) { return call.resultFor(meta); }));
    size_t position = 0;
    forEachTensor(results.back(), [&](const at::Tensor& accel) { call.noteFresh(accel, r, position++); });
  }
  bool writes = !call.fresh_results.empty();
  for (size_t i = 0; i < count && !writes; ++i) {
    const auto* alias = schema.arguments()[i].alias_info();
    writes = alias != nullptr && alias->isWrite();
  }
  writes |= op.hasTag(at::Tag::nondeterministic_seeded);
  if (writes) {
    std::vector<c10::IValue> arguments;
    arguments.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      arguments.push_back(
          mapTensors((*stack)[begin + i], [](const at::Tensor& tensor) { return heldForReplay(tensor); }));
    }
    capture.record(
        c10::toString(op.operator_name()),
        device,
        ReplayedCall(op, target_key, device, std::move(arguments), std::move(call.fresh_results)));
  }
  torch::jit::drop(*stack, count);
  for (auto& result : results) {
    stack->push_back(std::move(result));
  }
}

} // namespace

bool recordIfCapturing(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DispatchKey target_key) {
  const size_t count = op.schema().arguments().size();
  const c10::DeviceIndex device = callDevice(c10::ArrayRef<c10::IValue>(*stack).slice(stack->size() - count, count));
  RecordingCapture* capture = recordingCaptureOnCurrentStream(device);
  if (capture == nullptr) {
    return false;
  }
  capture->checkValid();
  record(*capture, op, stack, target_key, device);
  return true;
}

bool recordCopyIfCapturing(const at::Tensor& dst, const at::Tensor& src, bool non_blocking, CopyFunction copy) {
  const c10::DeviceIndex device = isAccel(dst) ? dst.device().index() : src.device().index();
  RecordingCapture* capture = recordingCaptureOnCurrentStream(device);
  if (capture == nullptr) {
    return false;
  }
  capture->checkValid();
  const at::Tensor& host = isAccel(dst) ? src : dst;
  if (!isAccel(host)) {
    // CUDA captures only asynchronous copies with pinned host memory; the
    // others wait for the stream (a copy to the host also reads results
    // that the capture has not computed).
    const bool pinned = host.device().is_cpu() && host.is_pinned();
    if (!(non_blocking && pinned)) {
      failCapture(
          *capture,
          isAccel(dst) ? "a copy from host memory that is not pinned or not non_blocking"
                       : "a copy to host memory that is not pinned or not non_blocking (Tensor.cpu(), Tensor.to())",
          device);
    }
  }
  // The step holds both sides as they are now (host tensors too: CUDA's
  // graph would read or write the same host memory at each replay).
  capture->record(
      "aten::copy_",
      device,
      [copy, non_blocking, dst = isAccel(dst) ? snapshotOf(dst) : dst, src = isAccel(src) ? snapshotOf(src) : src] {
        copy(dst, src, non_blocking);
      });
  return true;
}

} // namespace torch_accel
