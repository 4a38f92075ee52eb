// The alias fallback: how every ATen operator without an accel kernel of its
// own runs on accel (see "The alias fallback" in DESIGN.md).
//
// An accel tensor's memory is target-device memory (CUDA memory, or host
// memory the CPU kernels can address). For each accel tensor argument the
// fallback builds a new target tensor over the same memory, maps accel
// devices and generators to their target equivalents, runs the target's own
// kernel, and maps the results back:
//
//   - a result that is one of the target views is the accel argument itself
//     (in-place and out= ops return their argument);
//   - a result sharing a target view's storage is a view: a new accel tensor
//     over the argument's accel storage;
//   - a fresh result's allocation is adopted as accel memory (no copy), or
//     copied into accel memory when the runtime cannot adopt it.
//
// Arguments the kernel may mutate were given resizable target storage; if the
// kernel resized or restrided them, the new memory and metadata move back to
// the accel tensor. Accel tensors are never relabelled in place, so their
// other views stay accel tensors. The same kernel runs on the same memory, so
// results are bitwise those of the target device.

#include <csrc/aten/AliasFallback.h>
#include <csrc/aten/TargetTensor.h>
#include <csrc/profiler/DeviceActivity.h>
#include <csrc/runtime/AccelGenerator.h>
#include <csrc/runtime/Runtime.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace torch_accel {
namespace {

constexpr auto kAccel = c10::DeviceType::PrivateUse1;

bool isAccel(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == kAccel;
}

// Operators whose CUDA kernels take index tensors on the CPU and move them
// themselves; CUDA accepts them, so accel does too.
bool acceptsCpuTensors(const c10::OperatorName& name) {
  static const std::string_view ops[] = {
      "aten::index",
      "aten::index_put",
      "aten::index_put_",
      "aten::_index_put_impl_",
      "aten::_unsafe_index",
      "aten::_unsafe_index_put",
  };
  for (const auto op : ops) {
    if (name.name == op) {
      return true;
    }
  }
  return false;
}

bool isOptionalGenerator(const c10::Argument& argument) {
  const auto optional = argument.type()->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

// What the fallback needs to know about an operator's schema, worked out once
// per operator (per thread, so no lock) instead of on every call.
struct OperatorFacts {
  c10::OperatorName name;
  c10::SmallVector<bool, 8> mutable_arguments;   // written to: out=, in-place
  c10::SmallVector<bool, 8> optional_generators; // Generator? arguments
  bool draws_from_default_generator = false;     // random, without a generator argument
  bool accepts_cpu_tensors = false;

  explicit OperatorFacts(const c10::OperatorHandle& op) : name(op.operator_name()) {
    bool takes_generator = false;
    for (const auto& argument : op.schema().arguments()) {
      mutable_arguments.push_back(argument.alias_info() != nullptr && argument.alias_info()->isWrite());
      optional_generators.push_back(isOptionalGenerator(argument));
      takes_generator |= optional_generators.back() || argument.type()->kind() == c10::TypeKind::GeneratorType;
    }
    draws_from_default_generator = !takes_generator && op.hasTag(at::Tag::nondeterministic_seeded);
    accepts_cpu_tensors = acceptsCpuTensors(name);
  }
};

const OperatorFacts& factsFor(const c10::OperatorHandle& op) {
  // Keyed by schema address; the name check catches an address reused by an
  // operator registered after another was removed.
  thread_local std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OperatorFacts>> cache;
  auto& slot = cache[&op.schema()];
  if (!slot || slot->name != op.operator_name()) {
    slot = std::make_unique<OperatorFacts>(op);
  }
  return *slot;
}

// One accel tensor argument and the target view standing in for it.
struct MappedTensor {
  at::Tensor accel;
  at::Tensor target;
  c10::StorageImpl* target_storage; // the storage the target view was created with
  bool mutable_;
};

class FallbackCall {
public:
  FallbackCall(const c10::OperatorHandle& op, torch::jit::Stack* stack)
      : op_(op), schema_(op.schema()), facts_(factsFor(op)), stack_(*stack) {}

  ~FallbackCall() {
    // The next operator call can reuse the target views (see recycleTarget).
    for (auto& mapped : inputs_) {
      recycleTarget(std::move(mapped.target));
    }
  }

  FallbackCall(const FallbackCall&) = delete;
  FallbackCall& operator=(const FallbackCall&) = delete;

  void run() {
    const size_t arguments = schema_.arguments().size();
    const size_t begin = stack_.size() - arguments;
    for (size_t i = 0; i < arguments; ++i) {
      mapArgument(i, stack_[begin + i]);
    }
    resolveDevice();
    checkDevices();
    for (const size_t i : default_generator_args_) {
      stack_[begin + i] = c10::IValue(targetGenerator(defaultAccelGenerator(device_)));
    }

    const c10::DeviceType target_type = runtime().targetType();
    const c10::DispatchKey target_key = targetDispatchKey();
    TORCH_CHECK_NOT_IMPLEMENTED(
        op_.hasComputedKernelForDispatchKey(target_key),
        "The operator '",
        schema_.operator_name(),
        "' is not implemented for the accel device: its target device (",
        c10::DeviceTypeName(target_type, /*lower_case=*/true),
        ") has no kernel for it.");

    {
      c10::DeviceGuard device_guard(c10::Device(kAccel, device_));
      TargetAllocationsAreAccel allocations;
      std::optional<TargetDefaultGeneratorAsAccel> random_state;
      if (facts_.draws_from_default_generator) {
        random_state.emplace(device_);
      }
      try {
        // The target kernel is an accel kernel in profiler traces (see DeviceActivity.h).
        RecordDeviceActivity kernel(schema_.operator_name().name, device_);
        op_.redispatchBoxed(c10::DispatchKeySet(target_key), &stack_);
      } catch (const c10::OutOfMemoryError& e) {
        // The target's allocator names the target device; say which accel device it is.
        TORCH_CHECK_WITH(
            OutOfMemoryError,
            false,
            "accel:",
            static_cast<int>(device_),
            " out of memory while running ",
            schema_.operator_name(),
            ": ",
            e.what_without_backtrace());
      }
    }

    for (auto& mapped : inputs_) {
      if (mapped.mutable_) {
        syncBack(mapped);
      }
    }
    const size_t results = schema_.returns().size();
    countResultStorages(results);
    for (size_t i = stack_.size() - results; i < stack_.size(); ++i) {
      stack_[i] = mapResult(std::move(stack_[i]));
    }
  }

private:
  // --- Arguments ----------------------------------------------------------

  void mapArgument(size_t index, c10::IValue& value) {
    const bool is_mutable = facts_.mutable_arguments[index];
    if (value.isTensor()) {
      value = mapTensor(value.toTensor(), is_mutable);
    } else if (value.isTensorList()) {
      auto list = value.toTensorList();
      c10::List<at::Tensor> mapped;
      mapped.reserve(list.size());
      for (const at::Tensor& tensor : list) {
        mapped.push_back(mapTensor(tensor, is_mutable));
      }
      value = mapped;
    } else if (value.isOptionalTensorList()) {
      auto list = value.toOptionalTensorList();
      c10::List<std::optional<at::Tensor>> mapped;
      mapped.reserve(list.size());
      for (const std::optional<at::Tensor>& tensor : list) {
        mapped.push_back(tensor.has_value() ? std::optional<at::Tensor>(mapTensor(*tensor, is_mutable)) : std::nullopt);
      }
      value = mapped;
    } else if (value.isDevice()) {
      const c10::Device device = value.toDevice();
      if (device.type() == kAccel) {
        noteDevice(device.has_index() ? device.index() : currentDevice());
        value = c10::IValue(targetDevice(device.has_index() ? device.index() : currentDevice()));
      }
    } else if (value.isGenerator()) {
      const at::Generator& generator = value.toGenerator();
      // As CUDA kernels reject CPU generators, accel kernels reject non-accel ones.
      TORCH_CHECK(
          generator.device().type() == kAccel,
          "Expected a 'accel' device type for generator but found '",
          generator.device().type(),
          "' (when running ",
          schema_.operator_name(),
          ")");
      value = c10::IValue(targetGenerator(generator));
    } else if (value.isNone() && facts_.optional_generators[index]) {
      // Without a generator the target kernel would draw from the target
      // device's default generator; accel has its own.
      default_generator_args_.push_back(index);
    }
  }

  at::Tensor mapTensor(const at::Tensor& tensor, bool is_mutable) {
    // The same accel tensor passed twice (self and out=self) must be the same
    // target tensor, as on the target: kernels treat an output that is also an
    // input differently (in-place broadcasting rules, overlap checks).
    if (tensor.defined() && isAccel(tensor)) {
      for (auto& mapped : inputs_) {
        if (mapped.accel.unsafeGetTensorImpl() == tensor.unsafeGetTensorImpl()) {
          mapped.mutable_ |= is_mutable;
          return mapped.target;
        }
      }
    }
    if (!tensor.defined()) {
      return tensor;
    }
    if (!isAccel(tensor)) {
      noteForeignTensor(tensor);
      return tensor;
    }
    TORCH_CHECK_NOT_IMPLEMENTED(
        tensor.layout() == at::kStrided,
        "The operator '",
        schema_.operator_name(),
        "' got an accel tensor with layout ",
        tensor.layout(),
        "; accel supports strided tensors only");
    noteDevice(tensor.device().index());
    // Resizable even when not written to here: the same tensor may come back
    // as a mutable argument later in the argument list.
    at::Tensor target = toResizableTarget(tensor);
    inputs_.push_back({tensor, target, target.storage().unsafeGetStorageImpl(), is_mutable});
    return target;
  }

  void noteDevice(c10::DeviceIndex index) {
    if (device_ < 0) {
      device_ = index;
    } else if (index != device_ && other_accel_device_ < 0) {
      other_accel_device_ = index;
    }
  }

  void noteForeignTensor(const at::Tensor& tensor) {
    // CUDA kernels accept CPU scalars (0-dim tensors) next to device tensors.
    if (tensor.device().is_cpu() && tensor.dim() == 0) {
      return;
    }
    if (!foreign_device_.has_value()) {
      foreign_device_ = tensor.device();
    }
  }

  static c10::DeviceIndex currentDevice() {
    return c10::impl::getDeviceGuardImpl(kAccel)->getDevice().index();
  }

  void resolveDevice() {
    if (device_ < 0) {
      device_ = currentDevice(); // e.g. a factory that takes no device
    }
  }

  void checkDevices() const {
    TORCH_CHECK(
        other_accel_device_ < 0,
        "Expected all tensors to be on the same device, but found at least two devices, accel:",
        static_cast<int>(device_),
        " and accel:",
        static_cast<int>(other_accel_device_),
        "! (when running ",
        schema_.operator_name(),
        ")");
    // Target kernels cannot tell accel memory from host memory on the host
    // runtime, so the fallback enforces CUDA's rule on every runtime.
    TORCH_CHECK(
        !foreign_device_.has_value() || (foreign_device_->is_cpu() && facts_.accepts_cpu_tensors),
        "Expected all tensors to be on the same device, but found at least two devices, accel:",
        static_cast<int>(device_),
        " and ",
        foreign_device_.value_or(c10::Device(kAccel)),
        "! (when running ",
        schema_.operator_name(),
        ")");
  }

  // --- Results ------------------------------------------------------------

  size_t& resultStorageRefs(const c10::StorageImpl* storage) {
    for (auto& [impl, refs] : result_storage_refs_) {
      if (impl == storage) {
        return refs;
      }
    }
    return result_storage_refs_.emplace_back(storage, 0).second;
  }

  // Results that share one fresh storage (say, two views of one buffer) may
  // adopt it only if nothing else holds it.
  void countResultStorages(size_t results) {
    for (size_t i = stack_.size() - results; i < stack_.size(); ++i) {
      forEachTensor(stack_[i], [&](const at::Tensor& tensor) {
        if (tensor.defined() && tensor.has_storage()) {
          ++resultStorageRefs(tensor.storage().unsafeGetStorageImpl());
        }
      });
    }
  }

  template <typename Fn> static void forEachTensor(const c10::IValue& value, Fn&& fn) {
    if (value.isTensor()) {
      fn(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorList()) {
        fn(tensor);
      }
    }
  }

  c10::IValue mapResult(c10::IValue value) {
    if (value.isTensor()) {
      return mapResultTensor(value.toTensor());
    }
    if (value.isTensorList()) {
      auto list = value.toTensorList();
      c10::List<at::Tensor> mapped;
      mapped.reserve(list.size());
      for (const at::Tensor& tensor : list) {
        mapped.push_back(mapResultTensor(tensor));
      }
      return mapped;
    }
    return value;
  }

  at::Tensor mapResultTensor(const at::Tensor& result) {
    if (!result.defined() || result.device().type() != runtime().targetType()) {
      return result; // e.g. a CPU result of a CUDA kernel
    }
    TORCH_CHECK_NOT_IMPLEMENTED(
        result.layout() == at::kStrided && result.has_storage(),
        "The operator '",
        schema_.operator_name(),
        "' returned a ",
        result.layout(),
        " tensor; accel supports strided tensors only");
    for (const auto& mapped : inputs_) {
      if (result.unsafeGetTensorImpl() == mapped.target.unsafeGetTensorImpl()) {
        return mapped.accel; // in-place and out= results are the argument
      }
    }
    const c10::StorageImpl* storage = result.storage().unsafeGetStorageImpl();
    for (const auto& mapped : inputs_) {
      if (storage == mapped.target.storage().unsafeGetStorageImpl()) {
        // A view keeps its base's keys (autograd, or none for an inference
        // tensor) but not its lazy conjugation or negation bits.
        const auto keys = mapped.accel.key_set().remove(c10::DispatchKey::Conjugate).remove(c10::DispatchKey::Negative);
        return withMetadataOf(
            result,
            c10::make_intrusive<c10::TensorImpl>(
                c10::TensorImpl::VIEW, c10::Storage(mapped.accel.storage()), keys, result.dtype()));
      }
    }
    // The constructor adds autograd keys (unless in inference mode).
    return withMetadataOf(
        result,
        c10::make_intrusive<c10::TensorImpl>(
            adoptStorage(result.storage()), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), result.dtype()));
  }

  static at::Tensor withMetadataOf(const at::Tensor& like, c10::intrusive_ptr<c10::TensorImpl> impl) {
    impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
    impl->_set_conj(like.is_conj());
    impl->_set_neg(like.is_neg());
    return at::Tensor(std::move(impl));
  }

  c10::Storage adoptStorage(const c10::Storage& target) {
    c10::StorageImpl* impl = target.unsafeGetStorageImpl();
    for (const auto& [target_impl, accel] : adopted_) {
      if (target_impl == impl) {
        return accel;
      }
    }
    c10::Storage accel = adoptOrCopy(impl);
    adopted_.emplace_back(impl, accel);
    return accel;
  }

  c10::Storage adoptOrCopy(c10::StorageImpl* target) {
    const size_t nbytes = target->nbytes();
    // Owned only by this call's results: the allocation can change hands.
    if (c10::raw::intrusive_ptr::use_count(target) == resultStorageRefs(target)) {
      c10::DataPtr data = target->set_data_ptr(c10::DataPtr(nullptr, target->device()));
      if (runtime().adoptTargetAllocation(data, device_)) {
        return accelStorage(std::move(data), nbytes);
      }
      target->set_data_ptr(std::move(data));
    }
    return accelStorage(copyToAccel(target->data(), nbytes), nbytes);
  }

  static c10::Storage accelStorage(c10::DataPtr data, size_t nbytes) {
    return c10::Storage(
        c10::Storage::use_byte_size_t(), nbytes, std::move(data), runtime().allocator(), /*resizable=*/true);
  }

  // New accel memory holding a copy of `nbytes` of target memory at `data`.
  c10::DataPtr copyToAccel(const void* data, size_t nbytes) const {
    c10::DeviceGuard device_guard(c10::Device(kAccel, device_));
    c10::DataPtr accel = runtime().allocator()->allocate(nbytes);
    if (nbytes > 0) {
      targetBytes(accel.get(), nbytes, device_).copy_(targetBytes(const_cast<void*>(data), nbytes, device_));
    }
    return accel;
  }

  // A mutated argument whose kernel replaced or resized its storage, or
  // changed its sizes or strides, passes the change on to the accel tensor.
  void syncBack(const MappedTensor& mapped) {
    c10::TensorImpl* accel = mapped.accel.unsafeGetTensorImpl();
    const at::Tensor& target = mapped.target;
    c10::StorageImpl* target_storage = target.storage().unsafeGetStorageImpl();
    if (target_storage != mapped.target_storage) {
      accel->set_storage_keep_dtype(storageForReplacement(target.storage()));
    } else if (
        target_storage->data() != mapped.accel.storage().data() ||
        target_storage->nbytes() != mapped.accel.storage().nbytes()) {
      // Resized into new memory: the accel storage (shared by every view of
      // it) takes the new allocation, as a resize on the target would.
      c10::DataPtr data = target_storage->set_data_ptr(c10::DataPtr(nullptr, target_storage->device()));
      const size_t nbytes = target_storage->nbytes();
      c10::StorageImpl* accel_storage = mapped.accel.storage().unsafeGetStorageImpl();
      if (data.get() == accel_storage->data()) {
        // Same memory, only the byte count changed (a shrink).
        accel_storage->set_nbytes(nbytes);
      } else {
        if (!runtime().adoptTargetAllocation(data, device_)) {
          data = copyToAccel(data.get(), nbytes);
        }
        accel_storage->set_data_ptr_noswap(std::move(data));
        accel_storage->set_nbytes(nbytes);
      }
    }
    if (target.sizes() != mapped.accel.sizes() || target.strides() != mapped.accel.strides() ||
        target.storage_offset() != mapped.accel.storage_offset()) {
      accel->set_sizes_and_strides(target.sizes(), target.strides(), target.storage_offset());
    }
  }

  c10::Storage storageForReplacement(const c10::Storage& target) {
    for (const auto& mapped : inputs_) {
      if (target.unsafeGetStorageImpl() == mapped.target_storage) {
        return mapped.accel.storage();
      }
    }
    return adoptOrCopy(target.unsafeGetStorageImpl());
  }

  const c10::OperatorHandle& op_;
  const c10::FunctionSchema& schema_;
  const OperatorFacts& facts_;
  torch::jit::Stack& stack_;

  c10::SmallVector<MappedTensor, 4> inputs_;
  c10::SmallVector<size_t, 1> default_generator_args_;
  c10::DeviceIndex device_ = -1;
  c10::DeviceIndex other_accel_device_ = -1;
  std::optional<c10::Device> foreign_device_;
  c10::SmallVector<std::pair<const c10::StorageImpl*, size_t>, 2> result_storage_refs_;
  c10::SmallVector<std::pair<const c10::StorageImpl*, c10::Storage>, 2> adopted_;
};

std::atomic<uint64_t> fallbackCalls{0};

void aliasFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  runOnTarget(op, stack);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&aliasFallback>());
}

// Operators whose composite kernel calls CPU/CUDA-only code directly (a
// DispatchStub keyed by the tensors' device type), so PrivateUse1 cannot run
// it; through the fallback the composite runs on target tensors instead.
bool runsOnTargetComposite(std::string_view name) {
  return name == "aten::conj_physical_";
}

// Operators that must keep their composite kernel on accel: they move data
// between devices or manage storage, which the fallback's same-device rule
// and memory model do not describe.
bool keepsCompositeKernel(std::string_view name) {
  static const std::string_view ops[] = {
      "aten::copy_",
      "aten::_to_copy",
      "aten::to",
      "aten::_pin_memory",
      "aten::is_pinned",
      "aten::pin_memory",
      "aten::lift",
      "aten::lift_fresh",
      "aten::lift_fresh_copy",
      "aten::resize_as_",
      "aten::_has_same_storage_numel",
      "aten::set_",
  };
  for (const auto op : ops) {
    if (name == op) {
      return true;
    }
  }
  return name.rfind("aten::empty", 0) == 0 || name.rfind("aten::new_", 0) == 0;
}

} // namespace

void runOnTarget(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallbackCalls.fetch_add(1, std::memory_order_relaxed);
  FallbackCall(op, stack).run();
}

void preferTargetKernels() {
  // Many operators have both target kernels and a CompositeExplicitAutograd
  // kernel, which PrivateUse1 would otherwise get: a decomposition (slower,
  // and for some, like native_layer_norm, not bitwise the target's result) or
  // a functional wrapper around the out= variant. Route them to the target's
  // own kernel through the fallback instead.
  static std::once_flag registered;
  std::call_once(registered, [] {
    const c10::DispatchKey target_key = targetDispatchKey();
    static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    auto& dispatcher = c10::Dispatcher::singleton();
    for (const auto& name : dispatcher.getAllOpNames()) {
      if (name.getNamespace() != std::optional<std::string_view>("aten")) {
        continue;
      }
      const auto op = dispatcher.findOp(name);
      if (!op.has_value() || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) ||
          !(op->hasKernelForDispatchKey(target_key) || runsOnTargetComposite(name.name))) {
        continue;
      }
      const bool composite = op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
                             op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
      const std::string full_name = c10::toString(name);
      if (!(composite || runsOnTargetComposite(name.name)) || keepsCompositeKernel(name.name)) {
        continue;
      }
      // The library keeps pointers to the names it registers.
      static std::deque<std::string> names;
      names.push_back(full_name.substr(std::string_view("aten::").size()));
      library.impl(names.back().c_str(), torch::CppFunction::makeFromBoxedFunction<&aliasFallback>());
    }
  });
}

uint64_t aliasFallbackCalls() {
  return fallbackCalls.load(std::memory_order_relaxed);
}

} // namespace torch_accel
